#include "backend/cpu/linear.h"

#include <cblas.h>

#include <algorithm>

#include "backend/cpu/thread_pool.h"
#include "common/check.h"

namespace s4kv::backend::cpu {

void use_own_threads_for_blas() { openblas_set_num_threads(1); }

void linear(std::span<const float> x, std::span<const float> weight, std::span<const float> bias,
            int64_t in_features, int64_t out_features, std::span<float> out, bool accumulate,
            ThreadPool* pool) {
  S4KV_CHECK(in_features > 0 && out_features > 0, "linear: features");
  S4KV_CHECK(weight.size() == static_cast<size_t>(in_features * out_features), "linear: weight");
  S4KV_CHECK(x.size() % static_cast<size_t>(in_features) == 0, "linear: x size");
  const auto num_tokens = static_cast<int64_t>(x.size()) / in_features;
  S4KV_CHECK(out.size() == static_cast<size_t>(num_tokens * out_features), "linear: out size");
  S4KV_CHECK(bias.empty() || bias.size() == static_cast<size_t>(out_features), "linear: bias");
  if (num_tokens == 0) return;
  // Columns [begin, end) of out: rows [begin, end) of the weight.
  const auto gemm = [&](int64_t begin, int64_t end) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(num_tokens),
                static_cast<int>(end - begin), static_cast<int>(in_features), 1.0f, x.data(),
                static_cast<int>(in_features), weight.data() + begin * in_features,
                static_cast<int>(in_features), accumulate ? 1.0f : 0.0f, out.data() + begin,
                static_cast<int>(out_features));
  };
  const int threads = pool != nullptr ? pool->num_threads() : 1;
  if (threads == 1) {
    gemm(0, out_features);
  } else {
    // A few slices per thread (the pool hands them out dynamically), 64 columns at least.
    const int64_t slice =
        std::max<int64_t>(64, (out_features + 4 * threads - 1) / (4 * threads) + 15) / 16 * 16;
    const int64_t num_slices = (out_features + slice - 1) / slice;
    pool->parallel_for(
        num_slices, [&](int64_t i) { gemm(i * slice, std::min(out_features, (i + 1) * slice)); });
  }
  if (!bias.empty()) {
    for (int64_t t = 0; t < num_tokens; ++t) {
      float* row = out.data() + t * out_features;
      for (int64_t i = 0; i < out_features; ++i) row[i] += bias[i];
    }
  }
}

}  // namespace s4kv::backend::cpu
