// EngineConfig: the engine's start-up settings with vLLM's names (--max-model-len,
// --max-num-seqs, --max-num-batched-tokens, --block-size, --kv-cache-dtype ...), and their
// resolution against a model: the KV memory budget becomes a number of blocks
// (kv_capacity.h), unset limits get their defaults, and every combination that could not run
// is refused with a Status naming the flag. Plain data; no engine state.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "backend/backend.h"
#include "common/status.h"
#include "engine/model_runner.h"
#include "engine/scheduler.h"
#include "kv/kv_capacity.h"
#include "kv/kv_format.h"
#include "model/model_config.h"

namespace s4kv::engine {

// --max-num-seqs default on CPU (vLLM's GPU defaults are 256 and 1024; a CPU step is far slower,
// and each running sequence of an int4_kivi cache holds 16-bit residual and sink blocks).
inline constexpr int kDefaultMaxNumSeqsCpu = 64;
inline constexpr int64_t kDefaultMaxNumBatchedTokens = 2048;  // cpu, and small GPUs' server

// vLLM's larger defaults go to GPUs of at least 70 GiB, an A100 excepted.
bool is_large_gpu(int64_t device_memory_bytes, std::string_view device_name);

// --max-num-seqs 0 resolved as vLLM does on cuda: 1024 on a large GPU, else 256; 64 on cpu.
int default_max_num_seqs(std::string_view device, int64_t device_memory_bytes,
                         std::string_view device_name);

// --max-num-batched-tokens 0 resolved as vLLM does: 2048 on cpu; on cuda, for GPUs of at least
// 70 GiB (an A100 excepted) 8192 for a server and 16384 offline (generate, bench: vLLM's LLM
// class), else 2048 and 8192.
int64_t default_max_num_batched_tokens(std::string_view device, bool offline,
                                       int64_t device_memory_bytes, std::string_view device_name);

struct EngineConfig {
  int64_t max_model_len = 0;  // 0: min(max_position_embeddings, tokens the KV cache holds)
  int max_num_seqs = 0;       // 0: default_max_num_seqs() for the device (load_llm_engine), else 64
  // Set where max_num_seqs is the device's default (load_llm_engine): int4_kivi then takes no
  // more seats than the cache has room for (resolve_engine_config), rather than refusing to start.
  bool max_num_seqs_is_default = false;
  // 0: default_max_num_batched_tokens() for the device (load_llm_engine), else 2048
  int64_t max_num_batched_tokens = 0;
  bool offline = false;  // generate / bench rather than serve (vLLM's usage context)
  int block_size = kv::kDefaultBlockSize;
  kv::KvCacheDtype kv_cache_dtype = kv::KvCacheDtype::kInt4Kivi;
  // Pool plus residual and sink blocks. 0 (--kv-cache-memory auto): load_llm_engine sizes it,
  // kDefaultKvCacheMemoryBytes on cpu, the --gpu-memory-utilization share left on cuda.
  int64_t kv_cache_memory_bytes = kv::kDefaultKvCacheMemoryBytes;
  double gpu_memory_utilization = 0.9;  // cuda only
  int cpu_threads = 0;                  // cpu only: forward-pass threads; 0: the cores available
  bool enforce_eager = false;           // cuda only: no CUDA graphs for decode steps
  bool enable_prefix_caching = true;
  // --async-scheduling: schedule step N+1 while step N runs (engine_core.h)
  bool async_scheduling = false;
  uint64_t seed = 0;  // the engine RNG that keys unseeded requests
};

// Everything the engine is built from, checked.
struct ResolvedEngineConfig {
  SchedulerConfig scheduler;
  CacheConfig cache;
  backend::KvCacheConfig kv;
  ModelRunnerConfig runner;
  kv::KvCapacity capacity;
  // int4_kivi: pool blocks a running sequence's 16-bit residual ring takes (its seat's; the
  // capacity's blocks include them, kv_cache_manager.h), and pool blocks a 16-bit sink block
  // takes (sink runs; the capacity's blocks include them too).
  int64_t ring_blocks = 0;
  int64_t sink_run_blocks = 0;
  uint64_t seed = 0;
};

// "auto" (and "fp16"/"bf16": the model's 16-bit dtype either way), "fp8_e4m3" (or "fp8"),
// "int4_kivi". Anything else is kInvalidArgument naming --kv-cache-dtype.
Result<kv::KvCacheDtype> parse_kv_cache_dtype(std::string_view name);

// Resolves `config` for a model. Refuses (naming the flag and value) a bad block size, a
// budget that holds no block once the residual slots are set aside, a max_model_len above
// max_position_embeddings or above what the KV cache holds, and non-positive limits.
Result<ResolvedEngineConfig> resolve_engine_config(const EngineConfig& config,
                                                   const model::ModelConfig& model);

// The start-up line: capacity in the chosen dtype and in 16-bit, density, residual memory.
std::string describe_capacity(const ResolvedEngineConfig& config);

}  // namespace s4kv::engine
