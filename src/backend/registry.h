// The one file that names the backends: "cpu" (always built; the reference) and "cuda" (when
// the toolkit was found at build time). The engine and the CLI create backends only through
// here, so they include no backend's header and no CUDA header.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "backend/backend.h"
#include "common/dtype.h"
#include "common/status.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace s4kv::backend {

// True when this binary has the CUDA backend and a CUDA device is visible.
bool cuda_available();

// --device: "cpu" stays; "cuda" stays when cuda_available() (else kUnsupported: no device, or
// a build without the toolkit); "auto" is "cuda" when cuda_available(), else "cpu". Anything
// else is kInvalidArgument naming the flag.
Result<std::string> resolve_device(const std::string& device);

// The resolved device's name and memory (empty and 0 for cpu): what vLLM's defaults depend on.
struct DeviceInfo {
  std::string name;
  int64_t total_memory_bytes = 0;
};
DeviceInfo device_info(const std::string& device);

// --dtype (vLLM's values): "auto" is the checkpoint's dtype, fp32 checkpoints computing in bf16
// on the GPU; "bfloat16", "float16"/"half", "float32"/"float". The CPU backend always computes
// in fp32 and accepts only auto and float32. Returns the compute dtype of the resolved device.
Result<DType> resolve_dtype(const std::string& dtype, const std::string& device,
                            const model::ModelConfig& config);

// The flags that concern one device only.
struct DeviceOptions {
  double gpu_memory_utilization = 0.9;  // cuda: the share of the GPU profile() gives out
  int cpu_threads = 0;                  // cpu: threads of the forward pass; 0: the cores available
  bool enforce_eager = false;           // cuda: no CUDA graphs (--enforce-eager)
  // cuda: the decode merge in the attention item kernels (CudaBackendOptions); unset: as
  // S4KV_DECODE_MERGE says.
  std::optional<bool> fused_decode_merge;
};

// Creates the backend of a resolved device ("cpu" | "cuda") and compute dtype, before its
// start-up (backend.h): the caller asks unsupported(kv), profile() and calls init_kv_cache.
// kv: the cache's shape (num_blocks unused).
Result<std::unique_ptr<Backend>> make_backend(const std::string& device, DType compute_dtype,
                                              const model::ModelConfig& config,
                                              const model::ModelWeights& weights,
                                              const KvCacheConfig& kv, const BackendLimits& limits,
                                              const DeviceOptions& options = {});

// make_backend, then unsupported(kv) (its first reason as the error) and init_kv_cache(kv): for
// callers that pick num_blocks themselves (s4kv eval, tests).
Result<std::unique_ptr<Backend>> make_started_backend(
    const std::string& device, DType compute_dtype, const model::ModelConfig& config,
    const model::ModelWeights& weights, const KvCacheConfig& kv, const BackendLimits& limits,
    const DeviceOptions& options = {});

}  // namespace s4kv::backend
