// Products of fp32 activations with 16-bit weights (bf16 or fp16, the checkpoint's dtype), for
// the CPU backend's linear layers: out[t, n] = sum_k x[t, k] * w[n, k], each weight widened to
// fp32 exactly and every product accumulated in fp32 (so the result differs from an fp32 GEMM
// over the widened weights by summation order only).
//
// These kernels read each weight once per call and widen it in registers, dot products along k
// over tiles of a few tokens x 4 weight rows: the form for decode's few tokens. Many tokens (the
// prompt) take gemm16_packed.h's cache-blocked kernels, under the same contract.
//
// Kernels for three instruction sets, chosen at run time (cpu_isa()): AVX-512F (16 lanes),
// AVX2 + FMA + F16C (8 lanes) and a portable scalar one, the reference the others (and
// gemm16_packed's) are tested against (tests/backend/gemm16_test.cc). With accumulate, the sum
// of the products is added to out, never the products one by one onto out (which would round
// each at out's magnitude). S4KV_CPU_ISA=scalar|avx2|avx512 picks a lower one (benchmarks,
// tests); asking for one the processor lacks falls back to the best it has.
#pragma once

#include <cstdint>
#include <string_view>

namespace s4kv::backend::cpu {

enum class CpuIsa { kScalar, kAvx2, kAvx512 };

std::string_view cpu_isa_name(CpuIsa isa);

// The best instruction set this processor has, lowered by S4KV_CPU_ISA; read once.
CpuIsa cpu_isa();

// Whether this processor can run isa's kernels (kAvx512 implies kAvx2). Probed once.
bool cpu_supports(CpuIsa isa);

// out[t * out_stride + n] (+)= sum_k x[t * x_stride + k] * w[n * k_dim + k] for t in
// [0, num_tokens) and n in [0, num_out); w: num_out rows of k_dim 16-bit values (bf16 when
// `bf16`, else fp16). With accumulate the sum is added to out (the residual add). `isa` must be
// supported (cpu_supports).
void gemm16(CpuIsa isa, const float* x, int64_t x_stride, int64_t num_tokens, int64_t k_dim,
            const uint16_t* w, bool bf16, int64_t num_out, float* out, int64_t out_stride,
            bool accumulate);

// dst[i] = the fp32 value of src[i] (exact), i < n.
void widen16(CpuIsa isa, const uint16_t* src, bool bf16, int64_t n, float* dst);

}  // namespace s4kv::backend::cpu
