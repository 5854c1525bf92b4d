// Linear layers on the CPU: out = x @ weight^T (+ bias) (+ out), the Hugging Face layout
// (weight [out_features, in_features], row-major), fp32 activations and accumulation.
// 16-bit weights (cpu_weights.h) never leave 16 bits in memory: a few tokens (decode) go through
// gemm16's direct kernels (gemm16.h), which read each weight once and widen it in registers;
// more (prefill) through gemm16_packed's cache-blocked kernels (gemm16_packed.h), which widen
// blocks of the weight into per-thread panels reused by every token. fp32 weights (a checkpoint
// of mixed dtypes) go through OpenBLAS cblas_sgemm.
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

// Token counts up to which 16-bit weights take gemm16's direct kernels; gemm16_packed above. From
// 24 tokens (whole token tiles: 3 of 8 in AVX-512, 4 of 6 in AVX2) the packed kernels take as
// long or less over a layer of s4kv-tiny; below, widening every weight per call costs more than
// the blocking saves (bench/gemm16_bench.cc, docs/performance.md).
inline constexpr int64_t kGemm16DirectTokens = 23;

}  // namespace s4kv::backend::cpu
