// The CUDA backend: the CPU backend's forward recipe on the GPU, for every KV cache dtype
// (16-bit, fp8_e4m3, int4_kivi in the same bytes as the CPU). Host-only header (no CUDA types):
// the registry includes it.
//   embed -> [rmsnorm -> qkv GEMM (+bias) -> rope -> kv_write -> paged attention -> kv_commit
//             -> o_proj GEMM (+= residual) -> rmsnorm -> gate_up GEMM -> silu x up
//             -> down GEMM (+= residual)] x L -> final rmsnorm of the logits rows -> lm_head
// Weights live on the device in the compute dtype with q/k/v and gate/up concatenated; the
// residual stream and GEMM outputs are fp32 (cuBLASLt, fp32 accumulation). Every buffer is
// sized at construction from the limits; a step allocates nothing. Engine thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "common/dtype.h"
#include "common/status.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace s4kv::backend::cuda {

struct CudaBackendOptions {
  // kBF16, kF16 or kF32 (--dtype; the registry resolves auto: the checkpoint's 16-bit dtype,
  // bf16 for fp32 checkpoints).
  DType compute_dtype = DType::kBF16;
  int64_t max_num_tokens = 0;  // tokens of one step (max_num_batched_tokens)
  int64_t max_num_seqs = 0;    // sequences of one step
  int64_t max_model_len = 0;   // the longest sequence
};

// Device bytes the weights take in a compute dtype.
int64_t weight_bytes(const model::ModelConfig& config, DType compute_dtype);

// Device bytes of everything but the weights and the KV cache that a backend of these options
// allocates at start-up (activations of a max_num_tokens step, logits, int4_kivi staging and
// commit scratch, the RoPE table, the step arrays, the GEMM workspace): the backend allocates
// exactly this, so it is the step's peak activation memory.
int64_t activation_bytes(const model::ModelConfig& config, const KvCacheConfig& kv,
                         const CudaBackendOptions& options);

// vLLM's start-up arithmetic on device 0: the KV cache gets gpu_memory_utilization x total
// memory minus what is in use before loading (CUDA context, other processes), the weights,
// activation_bytes() and a reserve for the CUDA runtime's own allocations. kv carries the
// dtype, block size and int4_kivi variant (num_blocks unused).
struct CudaMemoryPlan {
  std::string device;  // "NVIDIA H200 (sm_90, 139 GiB)"
  int64_t total = 0, in_use = 0, weights = 0, activations = 0, reserve = 0;
  int64_t kv_budget = 0;  // bytes for the KV cache: pool, residual and sink blocks
};
// Refuses (one line naming the values): no device, compute capability below 8.0, weights (with
// activations) that do not fit in the utilization's share, a non-positive KV budget.
Result<CudaMemoryPlan> plan_cuda_memory(const model::ModelConfig& config, const KvCacheConfig& kv,
                                        const CudaBackendOptions& options,
                                        double gpu_memory_utilization);

// Refuses (kUnsupported / kInvalidArgument / kResourceExhausted, one line naming the value): no
// CUDA device, compute capability below 8.0, a head_dim other than 128, the keys-after-RoPE
// evaluation layout, weights that do not fit in free device memory, non-positive limits, and the
// KV layouts make_cpu_backend refuses. `weights` may be released once this returns.
Result<std::unique_ptr<Backend>> make_cuda_backend(const model::ModelConfig& config,
                                                   const model::ModelWeights& weights,
                                                   const KvCacheConfig& kv_config,
                                                   const CudaBackendOptions& options);

}  // namespace s4kv::backend::cuda
