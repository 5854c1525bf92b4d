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

// An RMSNorm in front of the GEMM: x = rmsnorm(rows of norm.x) . weight, made by each thread
// block in its shared memory with launch_row_rmsnorm's arithmetic and order (the same bits), so
// the norm needs no kernel of its own. norm.x: [n, in] fp32; weight [in] fp32.
struct SkinnyNorm {
  const float* x = nullptr;
  const float* weight = nullptr;
  float eps = 1e-6f;
};
inline constexpr int64_t kSkinnyNormMaxBytes = 96 << 10;  // the normed rows' shared memory
inline bool skinny_norm_fits(int64_t n, int64_t in) { return n * in * 2 <= kSkinnyNormMaxBytes; }

// Whether launch_skinny_gemm takes these: dtype bf16 or fp16, 1 <= n <= kSkinnyMaxRows, in a
// multiple of 8 and x, w 16-byte aligned.
bool skinny_gemm_supports(DType dtype, const void* x, const void* w, int64_t n, int64_t in);

// bias: nullptr, or fp32 [out] added to each output after the sum (one more rounding, as a
// separate addition). norm: nullptr, or the RMSNorm that makes x (x is then not read; n and in
// must satisfy skinny_norm_fits).
void launch_skinny_gemm(DType dtype, const void* x, const void* w, float* y, int64_t n, int64_t in,
                        int64_t out, bool accumulate, const float* bias, cudaStream_t stream,
                        const SkinnyNorm* norm = nullptr);

}  // namespace s4kv::backend::cuda
