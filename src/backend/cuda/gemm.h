// The CUDA backend's GEMMs through cuBLASLt: y[n, out] fp32 = x[n, in] . w[out, in]^T, x and w in
// the compute dtype (fp32, bf16 or fp16), fp32 accumulation (CUBLAS_COMPUTE_32F: no TF32 for
// fp32 inputs), y overwritten or accumulated into (the residual add of o_proj and down_proj, as
// the CPU's linear(accumulate)). One workspace, allocated once; the heuristic's algorithm is
// cached per shape. Row-major arrays are passed to cuBLASLt as their column-major transposes.
// A few rows (n <= kSkinnyMaxRows, 16-bit dtypes: decode steps of small batches) go to the
// bandwidth-bound kernel of skinny_gemm.cuh instead; S4KV_GEMM=cublas keeps them on cuBLASLt
// (benchmarks, A/B). On that path run_rope_kv and run_silu_mul make the elementwise step after
// the product inside the GEMM's kernel (skinny_gemm.cuh's epilogues, the same bits as the
// separate kernels); S4KV_GEMM_EPILOGUES names those it makes ("rope,silu" unless set; "0":
// none, the separate kernels; A/B).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <tuple>

#include "backend/cuda/forward_kernels.cuh"
#include "common/dtype.h"

struct cublasLtContext;

namespace s4kv::backend::cuda {

class Gemm {
 public:
  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;  // one per Gemm, at construction

  Gemm(DType dtype, cudaStream_t stream);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // bias (fp32 [out], optional): added to each row of y after the product (and the accumulation),
  // rounded once as a separate addition would.
  void run(const void* x, const void* w, float* y, int64_t n, int64_t in, int64_t out,
           bool accumulate, const float* bias = nullptr);
  // run(x, w, y, n, in, out, false, bias), then launch_rope_kv_write(rope, num_q_heads, kv) on
  // y's rows (rope.x == y, head_dim 128, the K and V heads after the query heads: out = 128 (q +
  // 2 kv)). The few-row kernel does that in its epilogue (the same bits).
  void run_rope_kv(const void* x, const void* w, float* y, int64_t n, int64_t in, int64_t out,
                   const float* bias, const RopeArgs& rope, int64_t num_q_heads,
                   const KvWriteArgs& kv);
  // y[n, 2 inter] = x . w^T (w: the gate rows, then the up rows), then act[n, inter] =
  // silu(gate) * up in the GEMM's dtype (launch_silu_mul's bits). The few-row kernel writes act
  // from the sums themselves (y is then not written).
  void run_silu_mul(const void* x, const void* w, float* y, void* act, int64_t n, int64_t in,
                    int64_t inter);

 private:
  struct Plan;
  const Plan& plan(int64_t n, int64_t in, int64_t out, bool accumulate);

  DType dtype_;
  cudaStream_t stream_;
  bool skinny_ = true;
  bool rope_epilogue_ = true, silu_epilogue_ = true;  // S4KV_GEMM_EPILOGUES (gemm.cc)
  cublasLtContext* handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<std::tuple<int64_t, int64_t, int64_t, bool>, Plan*> plans_;
};

}  // namespace s4kv::backend::cuda
