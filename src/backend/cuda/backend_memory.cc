#include "backend/cuda/backend_memory.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <string_view>

#include "backend/cuda/device.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/prefill_attention.cuh"
#include "backend/cuda/sampler.h"
#include "common/env_switch.h"

namespace s4kv::backend::cuda {
namespace {

// The step arena: ForwardBatch's arrays, the int4 fills, the attention plan (items, sequences,
// prefill tiles, pool ends, pool rows' bases, tiles and sequences) and the graph counts, in bytes
// with alignment slack (16 bytes for each of its 23 arrays).
size_t arena_bytes(int64_t max_tokens, int64_t max_seqs, int64_t max_table, int64_t max_fills,
                   int64_t nkv, int64_t max_items) {
  const int64_t max_tiles = max_tokens / kPrefillTileRows + max_seqs;
  // PrefillTile and PrefillMerge records in 32-bit words: split_prefill adds at most
  // kPrefillSplitSlots tiles and makes at most kPrefillSplitSlots / 2 merges (two slots or more
  // each).
  constexpr int64_t kTileWords = sizeof(PrefillTile) / 4, kMergeWords = sizeof(PrefillMerge) / 4;
  // The plan's records in 32-bit words (DecodeItem, DecodeSeq).
  constexpr int64_t kItemWords = sizeof(DecodeItem) / 4, kSeqWords = sizeof(DecodeSeq) / 4;
  static_assert(sizeof(DecodeItem) % 4 == 0 && sizeof(DecodeSeq) % 4 == 0, "32-bit words");
  const int64_t i32 = 4 * max_tokens + 4 * max_seqs + 1 + max_table + max_fills * nkv +
                      kItemWords * max_items + kSeqWords * max_seqs + max_tokens + max_seqs +
                      kStepLiveWords + kTileWords * (max_tiles + kPrefillSplitSlots) +
                      kMergeWords * (kPrefillSplitSlots / 2) + 3 * max_seqs;
  const int64_t i64 = max_tokens + max_fills * nkv;
  return static_cast<size_t>(i32 * 4 + i64 * 8 + max_fills * 12 + 23 * 16 + 4096);
}

// S4KV_PREFILL_POOL_ROWS: 1 (default) or 0 (for A/B runs).
bool prefill_pool_rows_enabled() {
  static const bool on = env_switch("S4KV_PREFILL_POOL_ROWS");
  return on;
}

// S4KV_PREFILL_POOL_ROW_CAP (for A/B runs of prompts past the default): the most positions the
// pool rows hold. Read once.
int64_t pool_row_cap() {
  static const int64_t cap = parse_pool_row_cap(std::getenv("S4KV_PREFILL_POOL_ROW_CAP"));
  return cap;
}

// int4_kivi with its tensor-core kernels (their tables and rows).
bool int4_kernels(const KvCacheConfig& kv, const CudaBackendOptions& o) {
  return kv.dtype == kv::KvCacheDtype::kInt4Kivi && tensor_core_attention(o.compute_dtype);
}

}  // namespace

bool tensor_core_attention(DType compute_dtype) { return compute_dtype != DType::kF32; }

int64_t parse_pool_row_cap(const char* env) {
  if (env == nullptr) return kDefaultPoolRowCap;
  const std::string_view s(env);
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  S4KV_CHECK(ec == std::errc() && end == s.data() + s.size() && v >= 64 &&
                 v <= (int64_t{1} << 20) && v % 64 == 0,
             "S4KV_PREFILL_POOL_ROW_CAP=", s, ": expected a multiple of 64 from 64 to 1048576");
  return v;
}

int64_t rope_bytes(const KvCacheConfig& kv, const CudaBackendOptions& o) {
  // The tables, and int4_kivi's rotations (int4_rotation_image: 4 KB a warp of its block) and the
  // tables' rows in fp16 (int4_prefill_rope_image: 256 bytes a row).
  const int64_t rope_rows = ceil_div(o.max_model_len, 1024) * 1024;
  return 2 * rope_rows * (kHeadDim / 2) * 4 +
         (int4_kernels(kv, o) ? kv.block_size / 16 * 4096 + rope_rows * kHeadDim * 2 : 0);
}

int64_t pool_row_capacity(const KvCacheConfig& kv, const CudaBackendOptions& o) {
  return int4_kernels(kv, o) && prefill_pool_rows_enabled()
             ? std::min<int64_t>(o.max_model_len, pool_row_cap())
             : 0;
}

DecodeShape decode_shape(const model::ModelConfig& c, const KvCacheConfig& kv, int num_sms) {
  DecodeShape d;
  d.cache = kv.dtype;
  d.block_size = static_cast<int>(kv.block_size);
  d.num_pool_blocks = kv.num_blocks;
  d.ring = 1 + static_cast<int>(kv.num_window_blocks);
  d.num_kv_heads = static_cast<int>(c.num_key_value_heads);
  d.num_sms = std::max(1, num_sms);
  d.blocks_per_sm = std::max(1, decode_blocks_per_sm(kv.dtype, d.block_size, kv.value_group_size));
  return d;
}

Sizes::Sizes(const model::ModelConfig& c, const KvCacheConfig& kv, const CudaBackendOptions& o) {
  const int64_t T = o.max_num_tokens, as = act_size(o.compute_dtype);
  const int64_t nkv = c.num_key_value_heads, kv_dim = nkv * kHeadDim;
  const int64_t q_dim = c.num_attention_heads * kHeadDim, qkv_dim = q_dim + 2 * kv_dim;
  max_blocks_per_seq = ceil_div(o.max_model_len, kv.block_size) + 1;
  max_fills = o.max_num_tokens / kv.block_size + o.max_num_seqs;
  decode_items = max_decode_items(o.max_num_seqs, decode_shape(c, kv, device_sm_count()));
  // The decode items' partial sums, or a step's split prefill tiles' (split_prefill), which the
  // prefill merge has combined before the decode items run.
  static_assert(kPrefillPartialFloats == kDecodePartialFloats);
  partials = std::max(decode_items * c.num_attention_heads * kDecodePartialFloats,
                      prefill_split_partial_floats(c.num_attention_heads)) *
             4;
  merge_counts = o.max_num_seqs * nkv * 4;  // DecodeLaunch::merge_counts
  arena = static_cast<int64_t>(arena_bytes(T, o.max_num_seqs, o.max_num_seqs * max_blocks_per_seq,
                                           max_fills, nkv, decode_items));
  const bool int4 = kv.dtype == kv::KvCacheDtype::kInt4Kivi;
  rope = rope_bytes(kv, o);
  staging = int4 ? T * kv_dim * 2 : 0;                                  // each of K, V
  scratch = int4 ? max_fills * nkv * kv.block_size * kHeadDim * 2 : 0;  // each of K, V
  pool_rows_capacity = pool_row_capacity(kv, o);
  pool_rows = pool_rows_capacity * kv_dim * 2;  // each of K, V
  x = T * c.hidden_size * 4;
  h = T * c.hidden_size * as;
  qkv = T * qkv_dim * 4;
  attn = T * q_dim * as;
  gate_up = T * 2 * c.intermediate_size * 4;
  act = T * c.intermediate_size * as;
  logit_rows = o.max_num_logits > 0 ? std::min(o.max_num_logits, T) : T;
  rows = logit_rows * c.hidden_size * as;
  logits = logit_rows * c.vocab_size * 4;
  sample_rows = std::min(o.max_num_seqs, logit_rows);  // one sampled row per sequence at most
  sampler = CudaSampler::device_bytes(c.vocab_size, sample_rows, o.max_model_len, logit_rows);
}

int64_t Sizes::total() const {
  return arena + partials + merge_counts + rope + 2 * staging + 2 * scratch + 2 * pool_rows + x +
         h + qkv + attn + gate_up + act + rows + logits + sampler + Gemm::kWorkspaceBytes;
}

KvParts kv_parts(const model::ModelConfig& c, const KvCacheConfig& kv,
                 const kv::Int4KiviLayout& layout) {
  const int64_t L = c.num_hidden_layers, B = kv.block_size, nkv = c.num_key_value_heads;
  const int64_t kv_dim = nkv * kHeadDim;
  KvParts p;
  if (kv.dtype == kv::KvCacheDtype::kInt4Kivi) {
    p.pool = L * int4_pool_blocks(kv, layout) * nkv * static_cast<int64_t>(layout.block_bytes);
    // Sinks of their own memory, or (sink_base_block >= 0) runs of the pool's.
    p.sink = kv.sink_base_block >= 0 ? 0 : L * (kv.num_sink_blocks + 1) * 2 * B * kv_dim * 2;
  } else {
    const int64_t es = kv.dtype == kv::KvCacheDtype::kFp8E4M3 ? 1 : 2;
    p.k = p.v = L * (kv.num_blocks + 1) * B * kv_dim * es;
  }
  return p;
}

KvCacheConfig profiling_kv_config(const KvCacheConfig& kv) {
  KvCacheConfig p = kv;
  p.num_blocks = 0;
  p.num_seats = 0;
  p.ring_base_block = -1;  // the dummy seat's ring, the pool's only blocks
  p.sink_base_block = -1;  // the sinks in memory of their own (the pool has no runs)
  p.sink_run_blocks = 0;
  p.num_sink_blocks = std::min<int64_t>(kv.num_sink_blocks, 1);
  return p;
}

int64_t weight_bytes(const model::ModelConfig& c, DType compute_dtype) {
  const int64_t as = act_size(compute_dtype);
  const int64_t matrices =
      model::count_parameters(c) - c.num_hidden_layers * 2 * c.hidden_size - c.hidden_size;
  return matrices * as + (2 * c.num_hidden_layers + 1) * c.hidden_size * 4;
}

// vLLM's capture sizes (1, 2, 4, then multiples of 8 up to 256 and of 16 beyond), up to the
// largest decode-only step (max_num_seqs rows, within max_num_tokens), which is a size too.
std::vector<int64_t> cuda_graph_sizes(int64_t largest) {
  std::vector<int64_t> sizes;
  for (int64_t s : {1, 2, 4}) {
    if (s <= largest) sizes.push_back(s);
  }
  for (int64_t s = 8; s <= largest && s <= 512; s += s < 256 ? 8 : 16) sizes.push_back(s);
  if (sizes.empty() || (sizes.back() < largest && largest <= 512)) sizes.push_back(largest);
  return sizes;
}

}  // namespace s4kv::backend::cuda
