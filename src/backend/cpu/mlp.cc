#include "backend/cpu/mlp.h"

#include <cmath>

#include "common/check.h"

namespace s4kv::backend::cpu {

void silu_mul_ref(std::span<const float> gate_up, int64_t intermediate_size, std::span<float> out) {
  const auto n = static_cast<size_t>(intermediate_size);
  S4KV_CHECK(gate_up.size() == 2 * out.size() && out.size() % n == 0, "silu_mul_ref: sizes");
  const size_t num_tokens = out.size() / n;
  for (size_t t = 0; t < num_tokens; ++t) {
    const float* gate = gate_up.data() + t * 2 * n;
    const float* up = gate + n;
    float* o = out.data() + t * n;
    for (size_t i = 0; i < n; ++i) {
      const float silu = gate[i] / (1.0f + std::exp(-gate[i]));
      o[i] = silu * up[i];
    }
  }
}

}  // namespace s4kv::backend::cpu
