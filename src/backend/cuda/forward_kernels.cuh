// The CUDA backend's elementwise and row kernels of one forward step (cuda_backend.cc names the
// recipe). The residual stream and every GEMM output are fp32; GEMM inputs (normed rows,
// attention output, SiLU x up) are in the compute dtype (act_dtype: kF32, kBF16 or kF16), so
// --dtype float32 runs the whole step in fp32, as the CPU reference does. Each kernel has its
// CPU reference in backend/cpu (named per kernel) and is checked through the whole-backend
// equivalence test (tests/backend/cuda_backend_test.cc). Launchers check shapes (aborting on a
// bug) and launch on the given stream; pointers are device memory.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/rope.cuh"
#include "common/dtype.h"

namespace s4kv::backend::cuda {

// embed_ref: x[t] = widen(table[token_ids[t]]); table [vocab, hidden] in act_dtype.
void launch_embed(const void* table, DType act_dtype, const int32_t* token_ids, float* x,
                  int64_t num_tokens, int64_t hidden, cudaStream_t stream);

// rmsnorm_ref: out[r] = x[row(r)] / sqrt(mean(x^2) + eps) * weight, fp32 math, out rounded to
// act_dtype. row(r) = rows[r] when rows is not null (the LM head's rows), else r.
struct RowNormArgs {
  const float* x = nullptr;       // [*, hidden] fp32
  const int32_t* rows = nullptr;  // [num_rows] or null
  const float* weight = nullptr;  // [hidden] fp32
  void* out = nullptr;            // [num_rows, hidden] act_dtype
  DType act_dtype = DType::kBF16;
  int64_t num_rows = 0;
  int64_t hidden = 0;
  float eps = 1e-6f;
};
void launch_row_rmsnorm(const RowNormArgs& args, cudaStream_t stream);

// linear's bias: y[t, i] += bias[i], y [num_tokens, width] fp32.
void launch_add_bias(float* y, const float* bias, int64_t num_tokens, int64_t width,
                     cudaStream_t stream);

// silu_mul_ref: out[t, i] = silu(gate[t, i]) * up[t, i] with gate_up [num_tokens, 2 * inter]
// fp32, out [num_tokens, inter] act_dtype.
void launch_silu_mul(const float* gate_up, void* out, DType act_dtype, int64_t num_tokens,
                     int64_t inter, cudaStream_t stream);

#if defined(__CUDACC__) || defined(S4KV_CUDA_EMULATION)
// silu(g) * u as silu_mul_ref rounds it; launch_silu_mul's kernel and the few-row GEMM's
// epilogue (skinny_gemm.cuh) share it.
__device__ __forceinline__ float silu_mul_value(float g, float u) {
  return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), u);
}
#endif

// kv_write: the step's new K (after RoPE) and V rows, [num_tokens, row_stride] fp32 each
// starting with kv_dim values, stored at cache row slot_mapping[t] (or row t when slot_mapping
// is null: int4_kivi's staging) of k_cache / v_cache [*, kv_dim]: 16-bit (bf16 / fp16 bits,
// round to nearest even, as kv_encode) or fp8_e4m3 bytes of the 16-bit value (satfinite, as
// the CPU's fp8 cache: float_to_fp8_e4m3 of the rounded 16-bit value).
struct KvWriteArgs {
  const float* k = nullptr;
  const float* v = nullptr;
  int64_t row_stride = 0;
  const int64_t* slot_mapping = nullptr;  // [num_tokens] or null
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  DType cache_dtype = DType::kBF16;  // kBF16, kF16 or kF8E4M3
  DType fp8_from = DType::kBF16;     // fp8: the 16-bit dtype rounded to first
  int64_t num_tokens = 0;
  int64_t kv_dim = 0;
};
void launch_kv_write(const KvWriteArgs& args, cudaStream_t stream);

// How a cache of KvWriteArgs' dtypes holds a value (kv_encode.cuh's store_kv): the 16-bit
// dtype's bits, or E4M3 of the value rounded to the 16-bit dtype first.
enum class KvStore : int32_t { kBf16, kF16, kFp8FromBf16, kFp8FromF16 };
// a.cache_dtype and a.fp8_from as a KvStore (a bug for any other pair: aborts).
KvStore kv_store_of(const KvWriteArgs& a);

// launch_rope(rope) then launch_kv_write(kv) in one kernel, with the same bits: rope's rows hold
// num_q_heads query heads, then the K heads that kv.k points at (kv.v right after them, the
// same row stride); each K head is rotated, written back and stored with its V head.
void launch_rope_kv_write(const RopeArgs& rope, int64_t num_q_heads, const KvWriteArgs& kv,
                          cudaStream_t stream);

}  // namespace s4kv::backend::cuda
