#include "backend/cpu/linear.h"

#include <cblas.h>

#include "common/check.h"

namespace s4kv::backend::cpu {

void linear(std::span<const float> x, std::span<const float> weight, std::span<const float> bias,
            int64_t in_features, int64_t out_features, std::span<float> out, bool accumulate) {
  S4KV_CHECK(in_features > 0 && out_features > 0, "linear: features");
  S4KV_CHECK(weight.size() == static_cast<size_t>(in_features * out_features), "linear: weight");
  S4KV_CHECK(x.size() % static_cast<size_t>(in_features) == 0, "linear: x size");
  const auto num_tokens = static_cast<int64_t>(x.size()) / in_features;
  S4KV_CHECK(out.size() == static_cast<size_t>(num_tokens * out_features), "linear: out size");
  S4KV_CHECK(bias.empty() || bias.size() == static_cast<size_t>(out_features), "linear: bias");
  if (num_tokens == 0) return;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(num_tokens),
              static_cast<int>(out_features), static_cast<int>(in_features), 1.0f, x.data(),
              static_cast<int>(in_features), weight.data(), static_cast<int>(in_features),
              accumulate ? 1.0f : 0.0f, out.data(), static_cast<int>(out_features));
  if (!bias.empty()) {
    for (int64_t t = 0; t < num_tokens; ++t) {
      float* row = out.data() + t * out_features;
      for (int64_t i = 0; i < out_features; ++i) row[i] += bias[i];
    }
  }
}

}  // namespace s4kv::backend::cpu
