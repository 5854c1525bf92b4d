#include "engine/engine_config.h"

#include <algorithm>
#include <sstream>

#include "kv/int4_kivi_layout.h"

namespace s4kv::engine {
namespace {

Status bad(std::string_view flag, int64_t value, std::string_view need) {
  std::ostringstream os;
  os << flag << '=' << value << ' ' << need;
  return invalid_argument(os.str());
}

Status check_limits(const EngineConfig& c) {
  if (c.max_model_len < 0) return bad("--max-model-len", c.max_model_len, "must be >= 1");
  if (c.max_num_seqs < 0) return bad("--max-num-seqs", c.max_num_seqs, "must be >= 1");
  if (c.max_num_batched_tokens < 0) {
    return bad("--max-num-batched-tokens", c.max_num_batched_tokens, "must be >= 1 (0: default)");
  }
  if (c.kv_cache_memory_bytes < 1) {
    return bad("--kv-cache-memory", c.kv_cache_memory_bytes, "must be positive");
  }
  return kv::validate_block_size(c.block_size);
}

// max_model_len: the requested value, checked against the model's positions, or the largest
// the model and the KV cache both allow.
Result<int64_t> resolve_max_model_len(const EngineConfig& c, const model::ModelConfig& m,
                                      const kv::KvCapacity& cap) {
  if (c.max_model_len == 0) return std::min(m.max_position_embeddings, cap.num_tokens);
  if (c.max_model_len > m.max_position_embeddings) {
    return bad(
        "--max-model-len", c.max_model_len,
        "exceeds the model's max_position_embeddings=" + std::to_string(m.max_position_embeddings));
  }
  return c.max_model_len;
}

}  // namespace

Result<kv::KvCacheDtype> parse_kv_cache_dtype(std::string_view name) {
  if (name == "auto" || name == "fp16" || name == "bf16") return kv::KvCacheDtype::k16Bit;
  if (name == "fp8_e4m3" || name == "fp8") return kv::KvCacheDtype::kFp8E4M3;
  if (name == "int4_kivi") return kv::KvCacheDtype::kInt4Kivi;
  return invalid_argument("unsupported --kv-cache-dtype=" + std::string(name) +
                          " (supported: auto, fp16, bf16, fp8_e4m3, int4_kivi)");
}

bool is_large_gpu(int64_t device_memory_bytes, std::string_view device_name) {
  return device_memory_bytes >= (int64_t{70} << 30) &&
         device_name.find("A100") == std::string_view::npos;
}

int default_max_num_seqs(std::string_view device, int64_t device_memory_bytes,
                         std::string_view device_name) {
  if (device != "cuda") return kDefaultMaxNumSeqsCpu;
  return is_large_gpu(device_memory_bytes, device_name) ? 1024 : 256;
}

int64_t default_max_num_batched_tokens(std::string_view device, bool offline,
                                       int64_t device_memory_bytes, std::string_view device_name) {
  if (device != "cuda") return kDefaultMaxNumBatchedTokens;
  if (is_large_gpu(device_memory_bytes, device_name)) return offline ? 16384 : 8192;
  return offline ? 8192 : kDefaultMaxNumBatchedTokens;
}

Result<ResolvedEngineConfig> resolve_engine_config(const EngineConfig& c,
                                                   const model::ModelConfig& m) {
  S4KV_RETURN_IF_ERROR(check_limits(c));
  ResolvedEngineConfig r;
  r.seed = c.seed;
  int max_num_seqs = c.max_num_seqs > 0 ? c.max_num_seqs : kDefaultMaxNumSeqsCpu;
  const int64_t max_num_batched_tokens =
      c.max_num_batched_tokens > 0 ? c.max_num_batched_tokens : kDefaultMaxNumBatchedTokens;
  const bool int4 = c.kv_cache_dtype == kv::KvCacheDtype::kInt4Kivi;
  // int4_kivi format v2 (docs/kv-format.md) keeps 16-bit each running sequence's partly filled
  // block and its last full block (the residual ring of its seat, in pool blocks the seat holds
  // while it runs: ring_blocks of the capacity's, plus one more ring after them for the dummy
  // seat) and its first block (a sink block: one of max_num_seqs, each a run of sink_run_blocks
  // pool blocks held while the sink is in use or cached, below the seats' runs, and one more run
  // for the dummy block's sink).
  const kv::Int4KiviVariant v2;
  if (int4) {
    S4KV_ASSIGN_OR_RETURN(const kv::Int4KiviLayout layout,
                          kv::Int4KiviLayout::create(c.block_size, static_cast<int>(m.head_dim),
                                                     kv::kDefaultValueGroupSize));
    r.ring_blocks = layout.ring_blocks(1 + v2.window_blocks);
    r.sink_run_blocks = v2.sink_blocks > 0 ? layout.ring_blocks(1) : 0;
  }
  S4KV_ASSIGN_OR_RETURN(r.capacity, kv::plan_kv_capacity(c.kv_cache_memory_bytes, c.kv_cache_dtype,
                                                         m.num_hidden_layers, m.num_key_value_heads,
                                                         m.head_dim, c.block_size));
  if (int4) {  // the dummy seat's ring, after the blocks the engine hands out
    if (r.capacity.num_blocks <= r.ring_blocks) {
      return bad("--kv-cache-memory", c.kv_cache_memory_bytes,
                 "holds " + std::to_string(r.capacity.num_blocks) +
                     " KV blocks, no more than int4_kivi's one residual ring takes (" +
                     std::to_string(r.ring_blocks) + ")");
    }
    r.capacity.num_blocks -= r.ring_blocks;
    r.capacity.num_tokens = r.capacity.num_blocks * c.block_size;
    // A defaulted --max-num-seqs gives way to a small cache: no more seats than their rings and
    // sink runs (the dummy block's too) fit in (vLLM's default runs on any cache that holds
    // one sequence; an explicit value too large is an error below).
    if (c.max_num_seqs_is_default) {
      const int64_t fit =
          (r.capacity.num_blocks - r.sink_run_blocks) / (r.ring_blocks + r.sink_run_blocks);
      max_num_seqs = static_cast<int>(std::clamp<int64_t>(fit, 1, max_num_seqs));
    }
  }
  S4KV_ASSIGN_OR_RETURN(const int64_t max_model_len, resolve_max_model_len(c, m, r.capacity));

  r.scheduler.max_num_seqs = max_num_seqs;
  r.scheduler.max_num_batched_tokens = max_num_batched_tokens;
  r.scheduler.max_model_len = max_model_len;
  r.scheduler.async_scheduling = c.async_scheduling;
  r.cache.num_blocks = static_cast<int>(r.capacity.num_blocks);
  r.cache.block_size = c.block_size;
  r.cache.enable_prefix_caching = c.enable_prefix_caching;
  r.cache.num_sink_blocks = int4 ? max_num_seqs * v2.sink_blocks : 0;
  r.cache.blocks_per_seat = static_cast<int>(r.ring_blocks);
  r.cache.sink_run_blocks = static_cast<int>(r.sink_run_blocks);  // 0 but for int4_kivi
  S4KV_RETURN_IF_ERROR(Scheduler::validate(r.scheduler, r.cache));

  r.kv.num_blocks = r.capacity.num_blocks;
  r.kv.block_size = c.block_size;
  r.kv.dtype = c.kv_cache_dtype;
  r.kv.num_seats =
      max_num_seqs;  // every dtype (backend.h); int4_kivi keeps its residual rings there
  r.kv.num_sink_blocks = r.cache.num_sink_blocks;
  r.kv.num_window_blocks = int4 ? v2.window_blocks : 0;
  r.kv.int4_value_hadamard = int4 && v2.value_hadamard;
  // The real seats' rings at the top of the blocks the engine hands out, the dummy seat's after.
  r.kv.ring_base_block =
      int4 ? kv::KvCacheManager::seat_runs_begin(r.kv.num_blocks, max_num_seqs, r.ring_blocks) : -1;
  // The sink blocks' runs below the seats' (the dummy block's last), as the manager has them.
  if (r.cache.sink_run_blocks > 0) {
    r.kv.sink_run_blocks = r.cache.sink_run_blocks;
    r.kv.sink_base_block = kv::KvCacheManager::sink_runs_begin(
        r.kv.ring_base_block, r.kv.num_sink_blocks, r.kv.sink_run_blocks);
  }
  r.runner = ModelRunnerConfig{max_num_seqs, max_num_batched_tokens, max_model_len};
  return r;
}

std::string describe_capacity(const ResolvedEngineConfig& r) {
  std::ostringstream os;
  os << kv::format_kv_capacity(r.capacity) << "; max_model_len " << r.scheduler.max_model_len
     << ", max_num_seqs " << r.scheduler.max_num_seqs;
  // vLLM's figure: the cache's tokens over max_model_len; for int4_kivi the pool blocks over
  // what one such request holds there (its blocks but the sink block, and its seat's ring).
  os.setf(std::ios::fixed);
  os.precision(2);
  double concurrency =
      static_cast<double>(r.capacity.num_tokens) / static_cast<double>(r.scheduler.max_model_len);
  if (r.ring_blocks > 0) {
    const int64_t per_request = Scheduler::blocks_per_sequence(r.scheduler.max_model_len, r.cache);
    concurrency = static_cast<double>(r.capacity.num_blocks) / static_cast<double>(per_request);
  }
  os << "; maximum concurrency for " << r.scheduler.max_model_len
     << " tokens per request: " << concurrency << "x";
  if (r.ring_blocks > 0) {
    os << "; each running sequence's 16-bit residual ring takes " << r.ring_blocks
       << " of these blocks while it runs, its 16-bit sink block " << r.cache.sink_run_blocks
       << " while it runs or is cached";
  }
  return os.str();
}

}  // namespace s4kv::engine
