#include "backend/cpu/rmsnorm.h"

#include <cmath>

#include "common/check.h"

namespace s4kv::backend::cpu {

void rmsnorm_ref(std::span<const float> x, std::span<const float> weight, float eps,
                 int64_t num_tokens, int64_t hidden_size, std::span<float> out) {
  const auto n = static_cast<size_t>(num_tokens * hidden_size);
  S4KV_CHECK(x.size() == n && out.size() == n, "rmsnorm_ref: x/out size mismatch");
  S4KV_CHECK(weight.size() == static_cast<size_t>(hidden_size), "rmsnorm_ref: weight size");
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* row = x.data() + t * hidden_size;
    float sum_sq = 0.0f;
    for (int64_t i = 0; i < hidden_size; ++i) sum_sq += row[i] * row[i];
    const float inv_rms = 1.0f / std::sqrt(sum_sq / static_cast<float>(hidden_size) + eps);
    float* dst = out.data() + t * hidden_size;
    for (int64_t i = 0; i < hidden_size; ++i) dst[i] = row[i] * inv_rms * weight[i];
  }
}

}  // namespace s4kv::backend::cpu
