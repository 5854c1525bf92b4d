// Linear layers on the CPU: out = x @ weight^T (+ bias) (+ out), the Hugging Face layout
// (weight [out_features, in_features], row-major), fp32 activations and accumulation.
// fp32 weights go through OpenBLAS cblas_sgemm. 16-bit weights (cpu_weights.h): a few tokens
// (decode) through gemm16's kernels, which read each weight once and widen it in registers;
// more (prefill) widen each column slice of the weight into a per-thread fp32 tile, then sgemm
// on it (the widening is small against the GEMM there).
// With a pool, the output features are split into column slices, one single-threaded product
// each on the pool's threads: the backend's one set of threads does GEMMs and attention alike,
// so OpenBLAS runs none of its own (use_own_threads_for_blas).
#pragma once

#include <cstdint>
#include <span>

namespace s4kv::backend::cpu {

class ThreadPool;
struct WeightMatrix;

// Makes OpenBLAS compute on the calling thread only, process-wide (the CPU backend's pool
// provides the parallelism). Idempotent.
void use_own_threads_for_blas();

// x: [num_tokens, in_features]; weight: [out_features, in_features]; bias: [out_features] or
// empty; out: [num_tokens, out_features]. out = x @ weight^T + bias, or with accumulate
// out += x @ weight^T + bias (the residual add folded into the GEMM's beta).
void linear(std::span<const float> x, std::span<const float> weight, std::span<const float> bias,
            int64_t in_features, int64_t out_features, std::span<float> out,
            bool accumulate = false, ThreadPool* pool = nullptr);

// The same with a weight matrix of any dtype: in_features = weight.cols, out_features =
// weight.rows.
void linear(std::span<const float> x, const WeightMatrix& weight, std::span<const float> bias,
            std::span<float> out, bool accumulate = false, ThreadPool* pool = nullptr);

// Token counts up to which 16-bit weights take gemm16's direct kernels.
inline constexpr int64_t kGemm16DirectTokens = 16;

}  // namespace s4kv::backend::cpu
