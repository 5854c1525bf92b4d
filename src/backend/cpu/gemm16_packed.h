// The many-token product of fp32 activations with 16-bit weights (the prompt's linear layers):
// the same contract as gemm16() (gemm16.h) -- every weight widened to fp32 exactly, every
// product accumulated in fp32, so the result differs from an fp32 GEMM over the widened weights
// by summation order only -- computed cache-blocked instead of row by row.
//
// The weight is read in blocks of output rows x k (about 256 KB of fp32, resident in L2),
// widened and transposed once per block into panels of kNr outputs for each k (a per-thread
// buffer); each group of kMr tokens is copied into a small L1 buffer; a register tile of kMr
// tokens x kNr outputs then accumulates broadcast activations times panel vectors. Every block
// is reused by all the call's tokens, so the widening costs ~1 / num_tokens of the products.
// Tails of tokens, outputs and k run through the same tiles (zero-padded panels, partial tiles
// through a scratch tile).
//
// Kernels for the instruction sets of gemm16.h (cpu_isa()); the scalar one shares the blocking
// and is checked, like the others, against gemm16's scalar reference
// (tests/backend/gemm16_test.cc). The buffers are thread_local, grown once per thread: no
// allocation once warm, no threads of its own (linear.cc splits the outputs over its pool).
#pragma once

#include <cstdint>

#include "backend/cpu/gemm16.h"

namespace s4kv::backend::cpu {

// gemm16()'s arguments and result: out[t * out_stride + n] (+)= sum_k x[t * x_stride + k] *
// w[n * k_dim + k] for t < num_tokens, n < num_out; w is bf16 when `bf16`, else fp16. Pays off
// from a few dozen tokens (linear.h's kGemm16DirectTokens). `isa` must be supported.
void gemm16_packed(CpuIsa isa, const float* x, int64_t x_stride, int64_t num_tokens, int64_t k_dim,
                   const uint16_t* w, bool bf16, int64_t num_out, float* out, int64_t out_stride,
                   bool accumulate);

}  // namespace s4kv::backend::cpu
