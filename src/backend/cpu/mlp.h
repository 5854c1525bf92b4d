// SwiGLU activation, CPU reference: out = silu(gate) * up with silu(x) = x / (1 + exp(-x)),
// in fp32. The MLP's three projections are GEMMs (linear.h); gate and up come from one fused
// GEMM, so each input row holds [gate | up]. Rows may be spread over a thread pool: each value
// is computed alone, so the bits do not depend on the threads.
#pragma once

#include <cstdint>
#include <span>

namespace s4kv::backend::cpu {

class ThreadPool;

// gate_up: [num_tokens, 2 * intermediate_size] fp32 ([gate | up] per row);
// out: [num_tokens, intermediate_size] fp32. pool: nullptr runs every row on the caller.
void silu_mul_ref(std::span<const float> gate_up, int64_t intermediate_size, std::span<float> out,
                  ThreadPool* pool = nullptr);

}  // namespace s4kv::backend::cpu
