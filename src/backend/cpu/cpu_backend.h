// The CPU backend: the reference forward pass of qwen2/llama models over a paged KV cache
// (16-bit, fp8_e4m3 or int4_kivi), fp32 compute. Weights are copied once at construction in the
// checkpoint's dtype (cpu_weights.h says why) and multiplied by linear.h's GEMMs; per-step
// activation buffers grow to the largest batch seen and are reused. The recipe (forward() in
// cpu_backend.cc) names the same steps as the CUDA backend:
//   embed -> [rmsnorm -> qkv -> rope -> kv_write -> attention -> kv_commit -> o_proj
//             -> rmsnorm -> mlp] x L -> final_norm -> lm_head
// kv_commit is int4_kivi's quantize-on-fill (a no-op for 16-bit and fp8). Engine thread only.
#pragma once

#include <memory>

#include "backend/backend.h"
#include "common/status.h"
#include "kv/kv_format.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace s4kv::backend::cpu {

struct CpuBackendOptions {
  // Threads of the forward pass, the caller included: GEMMs (one single-threaded product per
  // column slice, linear.h) and attention share them. 0: the cores this process may run on.
  int num_threads = 0;
};

// The backend before its start-up (backend.h: unsupported -> profile -> init_kv_cache). KV cache
// dtypes: 16-bit, fp8_e4m3 and int4_kivi (cpu_kv_cache.h); init_kv_cache refuses
// (kInvalidArgument) a non-positive num_blocks or block_size, and for int4_kivi a block size,
// value group size or head dim its layout does not allow or num_seats <= 0; profile()
// has no budget (--kv-cache-memory sizes the CPU's cache). `weights` may be released once this
// returns.
std::unique_ptr<Backend> make_cpu_backend(const model::ModelConfig& config,
                                          const model::ModelWeights& weights,
                                          CpuBackendOptions options = {});

// The same, started with kv_config (for tests and tools that pick num_blocks themselves).
Result<std::unique_ptr<Backend>> make_cpu_backend(const model::ModelConfig& config,
                                                  const model::ModelWeights& weights,
                                                  const KvCacheConfig& kv_config,
                                                  CpuBackendOptions options = {});

}  // namespace s4kv::backend::cpu
