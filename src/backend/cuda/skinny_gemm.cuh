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

#include "backend/cuda/forward_kernels.cuh"
#include "common/dtype.h"

namespace s4kv::backend::cuda {

inline constexpr int64_t kSkinnyMaxRows = 8;

// What the kernel does with its outputs besides writing y (gemm.h: run_silu_mul, run_rope_kv),
// so that the next elementwise step needs no kernel of its own.
//   kSiluMul: w's rows are [gate; up] (out = 2 inter); warp j takes gate row j and up row j and
//     writes act[m, j] = silu(gate) * up in the 16-bit dtype (launch_silu_mul's arithmetic: the
//     same bits); y is not written.
//   kRopeKv: y's rows are heads of 128 (num_q_heads query heads, then K heads, then V heads;
//     out = 128 (q + 2 kv)); warp j takes channels c and c + 64 of one head (the rotate-half
//     pair) and does what launch_rope_kv_write does after the product (and the bias): the pair
//     of a query or K head turned by its token's angle, y written, K and V pairs stored at the
//     token's slot in the caches (kv_encode.cuh); the same bits.
enum class SkinnyEpi { kNone, kSiluMul, kRopeKv };
struct SkinnyEpilogue {
  SkinnyEpi kind = SkinnyEpi::kNone;
  void* act = nullptr;  // kSiluMul: [n, out / 2] 16-bit
  // kRopeKv (row m of x is token m):
  const int32_t* positions = nullptr;  // [n]
  const float* cos = nullptr;          // [positions, 64] RopeTable rows
  const float* sin = nullptr;
  int32_t num_q_heads = 0, num_kv_heads = 0;
  const int64_t* slots = nullptr;  // [n] cache rows, or null: row m
  void* k_cache = nullptr;         // [*, num_kv_heads * 128] as `store` holds them
  void* v_cache = nullptr;
  KvStore store = KvStore::kBf16;
};

// Whether launch_skinny_gemm takes these: dtype bf16 or fp16, 1 <= n <= kSkinnyMaxRows, in a
// multiple of 8 and x, w 16-byte aligned.
bool skinny_gemm_supports(DType dtype, const void* x, const void* w, int64_t n, int64_t in);

// bias: nullptr, or fp32 [out] added to each output after the sum (one more rounding, as a
// separate addition; not with kSiluMul).
void launch_skinny_gemm(DType dtype, const void* x, const void* w, float* y, int64_t n, int64_t in,
                        int64_t out, bool accumulate, const float* bias, cudaStream_t stream,
                        const SkinnyEpilogue& epilogue = {});

}  // namespace s4kv::backend::cuda
