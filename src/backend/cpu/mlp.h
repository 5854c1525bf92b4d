// SwiGLU activation, CPU reference: out = silu(gate) * up with silu(x) = x / (1 + exp(-x)),
// in fp32. The MLP's three projections are GEMMs (linear.h); gate and up come from one fused
// GEMM, so each input row holds [gate | up].
#pragma once

#include <cstdint>
#include <span>

namespace s4kv::backend::cpu {

// gate_up: [num_tokens, 2 * intermediate_size] fp32 ([gate | up] per row);
// out: [num_tokens, intermediate_size] fp32.
void silu_mul_ref(std::span<const float> gate_up, int64_t intermediate_size, std::span<float> out);

}  // namespace s4kv::backend::cpu
