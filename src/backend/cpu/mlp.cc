#include "backend/cpu/mlp.h"

#include <cmath>

#include "backend/cpu/thread_pool.h"
#include "common/check.h"

namespace s4kv::backend::cpu {

void silu_mul_ref(std::span<const float> gate_up, int64_t intermediate_size, std::span<float> out,
                  ThreadPool* pool) {
  S4KV_CHECK(intermediate_size > 0, "silu_mul_ref: intermediate_size ", intermediate_size);
  const auto n = static_cast<size_t>(intermediate_size);
  S4KV_CHECK(gate_up.size() == 2 * out.size() && out.size() % n == 0, "silu_mul_ref: sizes");
  const auto num_tokens = static_cast<int64_t>(out.size() / n);
  parallel_for_rows(pool, num_tokens, intermediate_size, [&](int64_t begin, int64_t end) {
    for (auto t = static_cast<size_t>(begin); t < static_cast<size_t>(end); ++t) {
      const float* gate = gate_up.data() + t * 2 * n;
      const float* up = gate + n;
      float* o = out.data() + t * n;
      for (size_t i = 0; i < n; ++i) {
        const float silu = gate[i] / (1.0f + std::exp(-gate[i]));
        o[i] = silu * up[i];
      }
    }
  });
}

}  // namespace s4kv::backend::cpu
