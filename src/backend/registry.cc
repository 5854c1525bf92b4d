#include "backend/registry.h"

#include "backend/cpu/cpu_backend.h"
#ifdef S4KV_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/device.h"
#endif

namespace s4kv::backend {

bool cuda_available() {
#ifdef S4KV_HAVE_CUDA
  return cuda::device_count() > 0;
#else
  return false;
#endif
}

Result<std::string> resolve_device(const std::string& device) {
  if (device == "cpu") return device;
  if (device == "cuda") {
#ifdef S4KV_HAVE_CUDA
    if (!cuda_available()) return unsupported("--device cuda: no CUDA device is visible");
    return device;
#else
    return unsupported("--device cuda: this s4kv was built without the CUDA toolkit");
#endif
  }
  if (device == "auto") return std::string(cuda_available() ? "cuda" : "cpu");
  return invalid_argument("--device=" + device + " (supported: auto, cpu, cuda)");
}

DeviceInfo device_info(const std::string& device) {
  DeviceInfo info;
#ifdef S4KV_HAVE_CUDA
  if (device == "cuda" && cuda_available()) {
    info.name = cuda::device_name();
    info.total_memory_bytes = cuda::device_total_memory();
  }
#else
  (void)device;
#endif
  return info;
}

Result<DType> resolve_dtype(const std::string& dtype, const std::string& device,
                            const model::ModelConfig& config) {
  DType want;
  if (dtype == "auto") {
    if (device == "cpu") return DType::kF32;
    return config.dtype == DType::kF16 ? DType::kF16 : DType::kBF16;
  }
  if (dtype == "bfloat16") {
    want = DType::kBF16;
  } else if (dtype == "float16" || dtype == "half") {
    want = DType::kF16;
  } else if (dtype == "float32" || dtype == "float") {
    want = DType::kF32;
  } else {
    return invalid_argument("--dtype=" + dtype +
                            " (supported: auto, bfloat16, float16, half, float32, float)");
  }
  if (device == "cpu" && want != DType::kF32) {
    return invalid_argument("--dtype=" + dtype +
                            ": the CPU backend computes in float32 (use auto or float32)");
  }
  return want;
}

#ifdef S4KV_HAVE_CUDA
namespace {
cuda::CudaBackendOptions cuda_options(DType compute_dtype, const BackendLimits& limits,
                                      const DeviceOptions& device) {
  cuda::CudaBackendOptions options;
  options.gpu_memory_utilization = device.gpu_memory_utilization;
  options.enforce_eager = device.enforce_eager;
  options.fused_decode_merge = device.fused_decode_merge;
  options.compute_dtype = compute_dtype;
  options.max_num_tokens = limits.max_num_tokens;
  options.max_num_seqs = limits.max_num_seqs;
  options.max_model_len = limits.max_model_len;
  options.max_num_logits = limits.max_num_logits;
  return options;
}
}  // namespace
#endif

Result<std::unique_ptr<Backend>> make_backend(const std::string& device, DType compute_dtype,
                                              const model::ModelConfig& config,
                                              const model::ModelWeights& weights,
                                              const KvCacheConfig& kv, const BackendLimits& limits,
                                              const DeviceOptions& options) {
  if (device == "cpu") {
    return cpu::make_cpu_backend(config, weights, cpu::CpuBackendOptions{options.cpu_threads});
  }
  if (device != "cuda") return invalid_argument("--device=" + device + " (supported: cpu, cuda)");
#ifdef S4KV_HAVE_CUDA
  return cuda::make_cuda_backend(config, weights, kv, cuda_options(compute_dtype, limits, options));
#else
  (void)compute_dtype, (void)kv, (void)limits;
  return unsupported("--device cuda: this s4kv was built without the CUDA toolkit");
#endif
}

Result<std::unique_ptr<Backend>> make_started_backend(
    const std::string& device, DType compute_dtype, const model::ModelConfig& config,
    const model::ModelWeights& weights, const KvCacheConfig& kv, const BackendLimits& limits,
    const DeviceOptions& options) {
  S4KV_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend,
                        make_backend(device, compute_dtype, config, weights, kv, limits, options));
  if (const auto reasons = backend->unsupported(kv); !reasons.empty()) {
    return unsupported(reasons.front());
  }
  S4KV_RETURN_IF_ERROR(backend->init_kv_cache(kv));
  return backend;
}

}  // namespace s4kv::backend
