// RMSNorm on the device: out = x / sqrt(mean(x^2) + eps) * weight, bf16 in and out, fp32
// accumulation. One thread block per token. Tested against backend::cpu::rmsnorm_ref.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace s4kv::backend::cuda {

struct RmsnormArgs {
  const uint16_t* x = nullptr;       // [num_tokens, hidden_size] bf16 bits, device
  const uint16_t* weight = nullptr;  // [hidden_size] bf16 bits, device
  uint16_t* out = nullptr;           // [num_tokens, hidden_size] bf16 bits, device (may alias x)
  int64_t num_tokens = 0;
  int64_t hidden_size = 0;  // multiple of 2, <= 65536
  float eps = 1e-6f;
};

// Checks every shape (aborting on a bug) and launches on stream.
void launch_rmsnorm(const RmsnormArgs& args, cudaStream_t stream);

}  // namespace s4kv::backend::cuda
