#include "backend/cpu/linear.h"

#include <cblas.h>

#include <algorithm>

#include "backend/cpu/cpu_weights.h"
#include "backend/cpu/gemm16.h"
#include "backend/cpu/gemm16_packed.h"
#include "backend/cpu/thread_pool.h"
#include "common/check.h"

namespace s4kv::backend::cpu {
namespace {

// Runs part(begin, end) over column slices [begin, end) of out_features: inline with one
// thread, else a few slices per thread (the pool hands them out dynamically), 64 columns at
// least, multiples of 16.
template <typename Part>
void for_column_slices(int64_t out_features, ThreadPool* pool, const Part& part) {
  const int threads = pool != nullptr ? pool->num_threads() : 1;
  if (threads == 1) {
    part(0, out_features);
    return;
  }
  const int64_t slice =
      std::max<int64_t>(64, (out_features + 4 * threads - 1) / (4 * threads) + 15) / 16 * 16;
  const int64_t num_slices = (out_features + slice - 1) / slice;
  pool->parallel_for(num_slices,
                     [&](int64_t i) { part(i * slice, std::min(out_features, (i + 1) * slice)); });
}

// S4KV_CHECKs linear()'s shapes; returns num_tokens.
int64_t checked_tokens(std::span<const float> x, size_t weight_elems, std::span<const float> bias,
                       int64_t in_features, int64_t out_features, std::span<float> out) {
  S4KV_CHECK(in_features > 0 && out_features > 0, "linear: features");
  S4KV_CHECK(weight_elems == static_cast<size_t>(in_features * out_features), "linear: weight");
  S4KV_CHECK(x.size() % static_cast<size_t>(in_features) == 0, "linear: x size");
  const auto num_tokens = static_cast<int64_t>(x.size()) / in_features;
  S4KV_CHECK(out.size() == static_cast<size_t>(num_tokens * out_features), "linear: out size");
  S4KV_CHECK(bias.empty() || bias.size() == static_cast<size_t>(out_features), "linear: bias");
  return num_tokens;
}

void add_bias(std::span<const float> bias, int64_t num_tokens, int64_t out_features,
              std::span<float> out) {
  if (bias.empty()) return;
  for (int64_t t = 0; t < num_tokens; ++t) {
    float* row = out.data() + t * out_features;
    for (int64_t i = 0; i < out_features; ++i) row[i] += bias[i];
  }
}

void sgemm_slice(const float* x, int64_t num_tokens, int64_t in_features, const float* weight_rows,
                 int64_t begin, int64_t end, int64_t out_features, float* out, bool accumulate) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(num_tokens),
              static_cast<int>(end - begin), static_cast<int>(in_features), 1.0f, x,
              static_cast<int>(in_features), weight_rows, static_cast<int>(in_features),
              accumulate ? 1.0f : 0.0f, out + begin, static_cast<int>(out_features));
}

}  // namespace

void use_own_threads_for_blas() { openblas_set_num_threads(1); }

void linear(std::span<const float> x, std::span<const float> weight, std::span<const float> bias,
            int64_t in_features, int64_t out_features, std::span<float> out, bool accumulate,
            ThreadPool* pool) {
  const int64_t num_tokens = checked_tokens(x, weight.size(), bias, in_features, out_features, out);
  if (num_tokens == 0) return;
  for_column_slices(out_features, pool, [&](int64_t begin, int64_t end) {
    sgemm_slice(x.data(), num_tokens, in_features, weight.data() + begin * in_features, begin, end,
                out_features, out.data(), accumulate);
  });
  add_bias(bias, num_tokens, out_features, out);
}

void linear(std::span<const float> x, const WeightMatrix& weight, std::span<const float> bias,
            std::span<float> out, bool accumulate, ThreadPool* pool) {
  const int64_t in_features = weight.cols;
  const int64_t out_features = weight.rows;
  if (!weight.is_16bit()) {
    linear(x, weight.f32, bias, in_features, out_features, out, accumulate, pool);
    return;
  }
  const int64_t num_tokens =
      checked_tokens(x, weight.h16.size(), bias, in_features, out_features, out);
  if (num_tokens == 0) return;
  const bool bf16 = weight.dtype == DType::kBF16;
  const CpuIsa isa = cpu_isa();
  const auto gemm = num_tokens <= kGemm16DirectTokens ? &gemm16 : &gemm16_packed;
  for_column_slices(out_features, pool, [&](int64_t begin, int64_t end) {
    gemm(isa, x.data(), in_features, num_tokens, in_features,
         weight.h16.data() + begin * in_features, bf16, end - begin, out.data() + begin,
         out_features, accumulate);
  });
  add_bias(bias, num_tokens, out_features, out);
}

}  // namespace s4kv::backend::cpu
