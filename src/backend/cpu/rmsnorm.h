// RMSNorm, CPU reference: y = x / sqrt(mean(x^2) + eps) * weight, fp32 accumulation.
// The CUDA kernel (launch_row_rmsnorm, backend/cuda/forward_kernels.cuh) is tested against
// this function.
#pragma once

#include <cstdint>
#include <span>

namespace s4kv::backend::cpu {

// x: [num_tokens, hidden_size] fp32; weight: [hidden_size] fp32; out: like x (may alias x).
void rmsnorm_ref(std::span<const float> x, std::span<const float> weight, float eps,
                 int64_t num_tokens, int64_t hidden_size, std::span<float> out);

}  // namespace s4kv::backend::cpu
