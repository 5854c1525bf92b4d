// The one file that names the backends: "cpu" (always built; the reference) and "cuda" (when
// the toolkit was found at build time). The engine and the CLI create backends only through
// here, so they include no backend's header and no CUDA header.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "common/dtype.h"
#include "common/status.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace s4kv::backend {

// Sizes every per-step buffer of a backend at start-up.
struct BackendLimits {
  int64_t max_num_tokens = 0;  // --max-num-batched-tokens
  int64_t max_num_seqs = 0;    // --max-num-seqs
  int64_t max_model_len = 0;   // --max-model-len
};

// True when this binary has the CUDA backend and a CUDA device is visible.
bool cuda_available();

// --device: "cpu" stays; "cuda" stays when cuda_available() (else kUnsupported: no device, or
// a build without the toolkit); "auto" is "cuda" when cuda_available(), else "cpu". Anything
// else is kInvalidArgument naming the flag.
Result<std::string> resolve_device(const std::string& device);

// --dtype (vLLM's values): "auto" is the checkpoint's dtype, fp32 checkpoints computing in bf16
// on the GPU; "bfloat16", "float16"/"half", "float32"/"float". The CPU backend always computes
// in fp32 and accepts only auto and float32. Returns the compute dtype of the resolved device.
Result<DType> resolve_dtype(const std::string& dtype, const std::string& device,
                            const model::ModelConfig& config);

// The KV cache bytes (pool plus residual and sink blocks) a cuda backend of these limits gets
// from gpu_memory_utilization x the device's memory, and a line saying how (vLLM's start-up
// arithmetic: cuda/cuda_backend.h plan_cuda_memory). kv: dtype, block size, int4 variant.
// Refuses, one line naming the values: no device, compute capability below 8.0, weights that
// do not fit, nothing left for the KV cache.
struct KvBudget {
  int64_t bytes = 0;
  std::string line;
};
Result<KvBudget> cuda_kv_budget(DType compute_dtype, const model::ModelConfig& config,
                                const KvCacheConfig& kv, const BackendLimits& limits,
                                double gpu_memory_utilization);

// Creates the backend of a resolved device ("cpu" | "cuda") and compute dtype.
Result<std::unique_ptr<Backend>> make_backend(const std::string& device, DType compute_dtype,
                                              const model::ModelConfig& config,
                                              const model::ModelWeights& weights,
                                              const KvCacheConfig& kv, const BackendLimits& limits);

}  // namespace s4kv::backend
