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
#include <optional>
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
  int64_t max_num_logits = 0;  // logits rows of one step (0: max_num_tokens; BackendLimits)
  // profile(): the KV cache gets this share of the device's memory minus what is in use then.
  double gpu_memory_utilization = 0.9;
  // --enforce-eager: no CUDA graphs. Otherwise init_kv_cache captures one per decode batch size
  // (vLLM's sizes up to max_num_seqs) and decode-only steps replay them, padded.
  bool enforce_eager = false;
  // Decode steps whose sequences have few attention items merge them in the item kernels
  // instead of the merge kernel (decode_attention.cuh, DecodeLaunch::merge_counts). Unset: as
  // S4KV_DECODE_MERGE says (kernel unless it is fused).
  std::optional<bool> fused_decode_merge;
};

// How many steps of `backend` replayed a CUDA graph (-1: not a CUDA backend). For tests.
int64_t cuda_graph_replays(const Backend& backend);

// Device bytes the weights take in a compute dtype.
int64_t weight_bytes(const model::ModelConfig& config, DType compute_dtype);

// The backend with its weights and every per-step buffer resident, before its start-up
// (backend.h: unsupported -> profile -> init_kv_cache). kv: the cache's shape; num_blocks is
// ignored until init_kv_cache, which must get the same shape. profile() measures the device
// after construction (a step allocates nothing, so that is the peak outside the KV cache):
// gpu_memory_utilization x total - in use - a 512 MiB runtime reserve, vLLM's arithmetic.
// Refuses (kUnsupported / kInvalidArgument / kResourceExhausted, one line naming the value): no
// CUDA device, compute capability below 8.0, a head_dim other than 128, the keys-after-RoPE
// evaluation layout and other KV shapes unsupported() names, weights and activations that do not
// fit in free device memory, non-positive limits. `weights` may be released once this returns.
Result<std::unique_ptr<Backend>> make_cuda_backend(const model::ModelConfig& config,
                                                   const model::ModelWeights& weights,
                                                   const KvCacheConfig& kv_config,
                                                   const CudaBackendOptions& options);

}  // namespace s4kv::backend::cuda
