// Linear layers on the CPU: out = x @ weight^T (+ bias) (+ out), the Hugging Face layout
// (weight [out_features, in_features], row-major), through OpenBLAS cblas_sgemm, fp32.
#pragma once

#include <cstdint>
#include <span>

namespace s4kv::backend::cpu {

// x: [num_tokens, in_features]; weight: [out_features, in_features]; bias: [out_features] or
// empty; out: [num_tokens, out_features]. out = x @ weight^T + bias, or with accumulate
// out += x @ weight^T + bias (the residual add folded into the GEMM's beta).
void linear(std::span<const float> x, std::span<const float> weight, std::span<const float> bias,
            int64_t in_features, int64_t out_features, std::span<float> out,
            bool accumulate = false);

}  // namespace s4kv::backend::cpu
