// GEMMs of a few rows (decode steps of small batches): y[m, o] (+)= sum_k x[m, k] * w[o, k] for
// m < n <= kSkinnyMaxRows, x and w 16-bit (bf16 or fp16, one dtype), y fp32, fp32 accumulation.
// Such a GEMM reads every weight once and little else, so it is bound by memory bandwidth: each
// warp streams two weight rows 16 bytes per lane and load (eight loads in flight per thread),
// the rows of x (a few KB, read by every warp) come through the read-only cache, and each
// output is one warp's sum (lane order, then a fixed shuffle tree: the same bits on every run).
// Gemm::run sends n <= kSkinnyMaxRows here (gemm.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/dtype.h"

namespace s4kv::backend::cuda {

inline constexpr int64_t kSkinnyMaxRows = 8;

// Whether launch_skinny_gemm takes these: dtype bf16 or fp16, 1 <= n <= kSkinnyMaxRows, in a
// multiple of 8 and x, w 16-byte aligned.
bool skinny_gemm_supports(DType dtype, const void* x, const void* w, int64_t n, int64_t in);

void launch_skinny_gemm(DType dtype, const void* x, const void* w, float* y, int64_t n, int64_t in,
                        int64_t out, bool accumulate, cudaStream_t stream);

}  // namespace s4kv::backend::cuda
