// hadamard_ref: the fixed-order fast Walsh-Hadamard transform (hadamard.h). Built with
// -ffp-contract=off like the rest of src/kv.
#include "kv/hadamard.h"

#include <cmath>

#include "common/check.h"

namespace s4kv::kv {

void hadamard_ref(std::span<float> x) {
  const size_t n = x.size();
  S4KV_CHECK(n > 0 && (n & (n - 1)) == 0, "hadamard_ref: size ", n, " is not a power of two");
  for (size_t h = 1; h < n; h *= 2) {
    for (size_t i = 0; i < n; i += 2 * h) {
      for (size_t j = i; j < i + h; ++j) {
        const float a = x[j];
        const float b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
    }
  }
  const float scale =
      n == 128 ? kHadamardScale128 : static_cast<float>(1.0 / std::sqrt(static_cast<double>(n)));
  for (float& v : x) v = v * scale;
}

}  // namespace s4kv::kv
