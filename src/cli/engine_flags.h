// The engine flags `s4kv generate` and `s4kv serve` share, with `vllm serve`'s names:
// --model, --kv-cache-dtype, --max-model-len, --max-num-seqs, --max-num-batched-tokens,
// --block-size, --kv-cache-memory, --[no-]enable-prefix-caching, --load-format, --device,
// --dtype, --enforce-eager, --async-scheduling, --seed, --chat-template, and S4 KV's --cpu-threads,
// --gpu-memory-utilization; and their translation into engine::EngineArgs.
// Parsing only: the engine checks the combination when it is built.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "engine/llm_engine.h"

namespace CLI {
class App;
}  // namespace CLI

namespace s4kv::cli {

struct EngineFlags {
  std::string model;
  std::string chat_template;  // --chat-template FILE
  uint64_t seed = 0;          // --seed: the engine RNG (and dummy weights)
  std::string kv_cache_dtype = "int4_kivi";
  int64_t max_model_len = 0;
  int max_num_seqs = 0;
  int64_t max_num_batched_tokens = 0;  // 0: engine::default_max_num_batched_tokens
  int block_size = 64;
  std::string kv_cache_memory = "auto";  // cpu: 1GiB; cuda: --gpu-memory-utilization's share
  double gpu_memory_utilization = 0.9;
  int cpu_threads = 0;  // --cpu-threads: 0 = the cores available
  bool enable_prefix_caching = true;
  std::string load_format = "auto";
  std::string device = "auto";
  std::string dtype = "auto";
  bool enforce_eager = false;     // cuda: no CUDA graphs (decode steps replay them otherwise)
  bool async_scheduling = false;  // schedule step N+1 while step N runs
};

// Registers the flags on `sub`; `model_required` adds --model as a required option (serve
// also takes the model as its first positional argument and checks it itself).
void add_engine_flags(CLI::App& sub, EngineFlags& flags, bool model_required);

// "1073741824", "512MiB", "1GiB", "2G" (G, M, K read as binary units, as memory sizes are).
// `flag` names the option in the error message.
Result<int64_t> parse_bytes(const std::string& text, const std::string& flag);

Result<engine::EngineArgs> engine_args(const EngineFlags& flags);

// One line on stderr ("error: ..."), newlines flattened; returns exit code 2.
int fail(const std::string& message);

}  // namespace s4kv::cli
