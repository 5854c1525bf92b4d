#include "backend/cuda/gemm.h"

#include <cublasLt.h>

#include <cstdlib>
#include <string_view>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/skinny_gemm.cuh"

#define S4KV_CUBLAS_CHECK(expr)                                              \
  do {                                                                       \
    cublasStatus_t s4kv_st_ = (expr);                                        \
    S4KV_CHECK(s4kv_st_ == CUBLAS_STATUS_SUCCESS, #expr, ": cuBLAS status ", \
               static_cast<int>(s4kv_st_));                                  \
  } while (0)

namespace s4kv::backend::cuda {

struct Gemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  float beta = 0.0f;
};

namespace {

cudaDataType_t cuda_type(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return CUDA_R_32F;
    case DType::kBF16:
      return CUDA_R_16BF;
    case DType::kF16:
      return CUDA_R_16F;
    default:
      S4KV_CHECK(false, "gemm: dtype ", dtype_name(dtype));
  }
  return CUDA_R_32F;
}

}  // namespace

Gemm::Gemm(DType dtype, cudaStream_t stream) : dtype_(dtype), stream_(stream) {
  cuda_type(dtype);  // refuses other dtypes
  S4KV_CUBLAS_CHECK(cublasLtCreate(&handle_));
  S4KV_CUDA_CHECK(cudaMalloc(&workspace_, kWorkspaceBytes));
  workspace_bytes_ = kWorkspaceBytes;
  const char* choice = std::getenv("S4KV_GEMM");
  skinny_ = choice == nullptr || std::string_view(choice) != "cublas";
  // S4KV_GEMM_EPILOGUES: the epilogues the few-row kernel makes, "rope,silu" unless set.
  const char* epi = std::getenv("S4KV_GEMM_EPILOGUES");
  const std::string_view epilogues = epi != nullptr ? epi : "rope,silu";
  rope_epilogue_ = epilogues.find("rope") != std::string_view::npos;
  silu_epilogue_ = epilogues.find("silu") != std::string_view::npos;
}

Gemm::~Gemm() {
  for (auto& [key, p] : plans_) {
    cublasLtMatrixLayoutDestroy(p->a);
    cublasLtMatrixLayoutDestroy(p->b);
    cublasLtMatrixLayoutDestroy(p->c);
    cublasLtMatmulDescDestroy(p->desc);
    delete p;
  }
  if (workspace_ != nullptr) cudaFree(workspace_);
  if (handle_ != nullptr) cublasLtDestroy(handle_);
}

// Column-major view: D[out, n] = W^T[out, in] . X[in, n] with W stored [in, out] (ld in) and X
// stored [in, n] (ld in): op(A) = T on W, op(B) = N on X.
const Gemm::Plan& Gemm::plan(int64_t n, int64_t in, int64_t out, bool accumulate) {
  const auto key = std::make_tuple(n, in, out, accumulate);
  if (auto it = plans_.find(key); it != plans_.end()) return *it->second;
  auto* p = new Plan;
  const cudaDataType_t t = cuda_type(dtype_);
  S4KV_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t trans = CUBLAS_OP_T, no = CUBLAS_OP_N;
  S4KV_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans, sizeof(trans)));
  S4KV_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &no, sizeof(no)));
  S4KV_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, t, static_cast<uint64_t>(in),
                                               static_cast<uint64_t>(out), in));
  S4KV_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, t, static_cast<uint64_t>(in),
                                               static_cast<uint64_t>(n), in));
  S4KV_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->c, CUDA_R_32F, static_cast<uint64_t>(out),
                                               static_cast<uint64_t>(n), out));
  p->beta = accumulate ? 1.0f : 0.0f;
  cublasLtMatmulPreference_t pref = nullptr;
  S4KV_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  S4KV_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_, sizeof(workspace_bytes_)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  S4KV_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle_, p->desc, p->a, p->b, p->c, p->c, pref,
                                                   1, &result, &found));
  cublasLtMatmulPreferenceDestroy(pref);
  S4KV_CHECK(found > 0, "gemm: cuBLASLt has no algorithm for n=", n, " in=", in, " out=", out);
  p->algo = result.algo;
  plans_.emplace(key, p);
  return *p;
}

void Gemm::run(const void* x, const void* w, float* y, int64_t n, int64_t in, int64_t out,
               bool accumulate, const float* bias) {
  if (n == 0) return;
  if (skinny_ && skinny_gemm_supports(dtype_, x, w, n, in)) {
    launch_skinny_gemm(dtype_, x, w, y, n, in, out, accumulate, bias, stream_);
    return;
  }
  const Plan& p = plan(n, in, out, accumulate);
  const float alpha = 1.0f;
  S4KV_CUBLAS_CHECK(cublasLtMatmul(handle_, p.desc, &alpha, w, p.a, x, p.b, &p.beta, y, p.c, y, p.c,
                                   &p.algo, workspace_, workspace_bytes_, stream_));
  if (bias != nullptr) launch_add_bias(y, bias, n, out, stream_);
}

void Gemm::run_rope_kv(const void* x, const void* w, float* y, int64_t n, int64_t in, int64_t out,
                       const float* bias, const RopeArgs& rope, int64_t num_q_heads,
                       const KvWriteArgs& kv) {
  if (n == 0) return;
  const int64_t nkv = rope.num_heads - num_q_heads;
  const bool layout =
      rope.x == y && rope.head_dim == 128 && rope.num_tokens == n &&
      (rope.row_stride == out || (rope.row_stride == 0 && rope.num_heads * 128 == out)) &&
      nkv > 0 && out == 128 * (num_q_heads + 2 * nkv) && kv.num_tokens == n &&
      kv.kv_dim == nkv * 128 && kv.row_stride == out && kv.k == y + num_q_heads * 128 &&
      kv.v == kv.k + kv.kv_dim;
  if (rope_epilogue_ && skinny_ && layout && skinny_gemm_supports(dtype_, x, w, n, in)) {
    SkinnyEpilogue e;
    e.kind = SkinnyEpi::kRopeKv;
    e.positions = rope.positions;
    e.cos = rope.cos;
    e.sin = rope.sin;
    e.num_q_heads = static_cast<int32_t>(num_q_heads);
    e.num_kv_heads = static_cast<int32_t>(nkv);
    e.slots = kv.slot_mapping;
    e.k_cache = kv.k_cache;
    e.v_cache = kv.v_cache;
    e.store = kv_store_of(kv);
    launch_skinny_gemm(dtype_, x, w, y, n, in, out, false, bias, stream_, e);
    return;
  }
  run(x, w, y, n, in, out, false, bias);
  launch_rope_kv_write(rope, num_q_heads, kv, stream_);
}

void Gemm::run_silu_mul(const void* x, const void* w, float* y, void* act, int64_t n, int64_t in,
                        int64_t inter) {
  if (n == 0) return;
  if (silu_epilogue_ && skinny_ && skinny_gemm_supports(dtype_, x, w, n, in)) {
    SkinnyEpilogue e;
    e.kind = SkinnyEpi::kSiluMul;
    e.act = act;
    launch_skinny_gemm(dtype_, x, w, y, n, in, 2 * inter, false, nullptr, stream_, e);
    return;
  }
  run(x, w, y, n, in, 2 * inter, false);
  launch_silu_mul(y, act, dtype_, n, inter, stream_);
}

}  // namespace s4kv::backend::cuda
