// The CUDA backend's GEMMs through cuBLASLt: y[n, out] fp32 = x[n, in] . w[out, in]^T, x and w in
// the compute dtype (fp32, bf16 or fp16), fp32 accumulation (CUBLAS_COMPUTE_32F: no TF32 for
// fp32 inputs), y overwritten or accumulated into (the residual add of o_proj and down_proj, as
// the CPU's linear(accumulate)). One workspace, allocated once; the heuristic's algorithm is
// cached per shape. Row-major arrays are passed to cuBLASLt as their column-major transposes.
// A few rows (n <= kSkinnyMaxRows, 16-bit dtypes: decode steps of small batches) go to the
// bandwidth-bound kernel of skinny_gemm.cuh instead; S4KV_GEMM=cublas keeps them on cuBLASLt
// (benchmarks, A/B). S4KV_NORM_FUSION=1 makes run_normed's RMSNorm inside the few-row GEMM
// (opt-in: on the H200 the batch-1 step was 0.22 ms slower with it, docs/performance.md).
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
  // run() of the RMSNorm of norm.x's rows (norm.rows null, norm.num_rows rows of norm.hidden):
  // launch_row_rmsnorm into norm.out, then run() on it; with S4KV_NORM_FUSION=1, on the few-row
  // path, each thread block norms them itself instead (the same bits, norm.out not written).
  void run_normed(const RowNormArgs& norm, const void* w, float* y, int64_t out, bool accumulate,
                  const float* bias = nullptr);

 private:
  struct Plan;
  const Plan& plan(int64_t n, int64_t in, int64_t out, bool accumulate);

  DType dtype_;
  cudaStream_t stream_;
  bool skinny_ = true;
  bool fuse_norm_ = false;  // S4KV_NORM_FUSION=1: run_normed's norm in the few-row GEMM
  cublasLtContext* handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<std::tuple<int64_t, int64_t, int64_t, bool>, Plan*> plans_;
};

}  // namespace s4kv::backend::cuda
