// Attention over a KV cache of any dtype, CPU reference. For every sequence of a flat batch
// and every query head h (GQA: kv head h / (num_heads / num_kv_heads)), the new token j of a
// sequence with q_len new tokens and seq_len context attends to cache positions
// 0..seq_len - q_len + j (causal within the new tokens). One kernel for every cache dtype: a
// gather function fills a run of a sequence's context K/V of one kv head as fp32 rows (16-bit: the
// bits kv_write stored; fp8 / int4_kivi: dequantized, int4 keys re-rotated), then the same fp32
// math runs. Softmax in fp32 with max subtraction; scores scaled by `scale` (1/sqrt(head_dim)).
// Values the gather marks as rotated (RotatedValues) are accumulated apart and rotated back.
// A cache may instead hand over a run of int4_kivi pool blocks (Int4BlockRun), which attention
// reads in place (int4_attention.h) with the same operations, so the same bits, as on gathered
// rows; or a sequence's whole context in a paged 16-bit cache (Paged16BitRun), whose rows the
// same dot and weighted-sum kernels read in place, widening each element exactly in registers.
// paged_attention_ref is the 16-bit paged cache's wrapper around it (gathered).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>

#include "backend/cpu/gemm16.h"
#include "common/dtype.h"

namespace s4kv::backend {
class RopeTable;
}
namespace s4kv::kv {
struct Int4KiviLayout;
}

namespace s4kv::backend::cpu {

class ThreadPool;

// Positions [begin, end) of a gathered context whose values are in the Hadamard domain
// (int4_kivi with KvCacheConfig::int4_value_hadamard: dequantized, not rotated back). Attention
// sums their weighted values apart and rotates that sum back once per query head
// (kv::hadamard_ref, its own inverse). Empty for every other format.
struct RotatedValues {
  int64_t begin = 0;
  int64_t end = 0;
};

// Fills row p - begin of keys and values ([end - begin, head_dim] fp32 each; either may be
// null: not wanted) with position p of sequence `seq`'s context for kv head `kv_head`, as
// attention must see it, for p in [begin, end), and says which of those values are rotated.
// Called from pool threads concurrently (distinct outputs): it must not mutate shared state.
using KvGatherFn = std::function<RotatedValues(int64_t seq, int64_t kv_head, int64_t begin,
                                               int64_t end, float* keys, float* values)>;

// Blocks [first, end) of a sequence's block table (positions [first * B, end * B), all before
// the step's first new token) that attention reads in place from an int4_kivi pool of one layer,
// for one kv head; the rest of the context still comes from the gather. Empty: none.
struct Int4BlockRun {
  const kv::Int4KiviLayout* layout = nullptr;
  const std::byte* base = nullptr;  // block id's bytes (this kv head) at base + id * block_stride
  size_t block_stride = 0;
  const int32_t* table = nullptr;  // the sequence's block table (ids < the pool's blocks)
  int64_t first = 0, end = 0;
  const RopeTable* rope = nullptr;  // keys stored before RoPE, rotated with it; null: after
  bool values_rotated = false;      // values in the Hadamard domain (as RotatedValues)
  bool empty() const { return first >= end; }
};

// A sequence's whole context of one kv head in a paged 16-bit cache of one layer (all of its
// seq_len positions, the step's new tokens included: kv_write ran), read in place, never
// gathered. Position p's row: head_dim elements at k (v) + slot * slot_elems, slot =
// table[p / block_size] * block_size + p % block_size. Empty: none.
struct Paged16BitRun {
  const uint16_t* k = nullptr;  // the layer's K bits at this kv head's offset
  const uint16_t* v = nullptr;  // like k
  int64_t slot_elems = 0;       // num_kv_heads * head_dim
  int64_t block_size = 0;
  const int32_t* table = nullptr;  // the sequence's block table (ids checked by the cache)
  DType dtype = DType::kBF16;      // kBF16 or kF16
  bool empty() const { return k == nullptr; }
};

// What attention reads in place for one (sequence, kv head); at most one of them non-empty.
struct KvInPlaceRun {
  Int4BlockRun int4;
  Paged16BitRun paged16;
};

// Sequence seq's run for kv head kv_head. Called from pool threads concurrently: read-only.
using KvInPlaceRunFn = std::function<KvInPlaceRun(int64_t seq, int64_t kv_head)>;

inline constexpr int64_t kAttentionChunk = 256;

struct AttentionArgs {
  std::span<const float> q;  // [num_tokens, q_stride] fp32, heads first: num_heads * head_dim
  int64_t q_stride = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  float scale = 0.0f;
  std::span<const int32_t> query_start_loc;  // [num_seqs + 1]
  std::span<const int32_t> seq_lens;         // [num_seqs]
  std::span<float> out;                      // [num_tokens, num_heads * head_dim] fp32
  // The inner loops' instruction set (gemm16.h), cpu_isa() when unset. Every choice gives the
  // same bits (same operations in the same order); tests compare them.
  std::optional<CpuIsa> isa;
};

// Work is split over (sequence, kv head, chunk of queries) items on pool (nullptr: inline).
// An item reads its context in chunks of kAttentionChunk positions (a multiple of every block
// size), keys for the scores, then values for the weighted sums, so no step holds a whole
// context as fp32: each position is gathered once per item (twice at the boundary of the
// rotated values). The result does not depend on the pool or the chunking: every sum runs in
// position order.
void context_attention_ref(const AttentionArgs& args, const KvGatherFn& gather, ThreadPool* pool);

// The same with what in_place names read in place (never gathered); every other position is
// gathered as above. The same bits as context_attention_ref over a gather that dequantizes the
// int4 blocks (int4_dequant.h) and rotates their keys (rope_rotate), or widens the 16-bit rows.
void context_attention(const AttentionArgs& args, const KvGatherFn& gather,
                       const KvInPlaceRunFn& in_place, ThreadPool* pool);

struct PagedAttentionArgs {
  std::span<const float> q;  // [num_tokens, q_stride] fp32, heads first: num_heads * head_dim
  int64_t q_stride = 0;
  std::span<const uint16_t> k_cache;  // [num_blocks, block_size, num_kv_heads, head_dim] 16-bit
  std::span<const uint16_t> v_cache;  // like k_cache
  DType cache_dtype = DType::kBF16;
  int64_t block_size = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  float scale = 0.0f;
  std::span<const int32_t> query_start_loc;  // [num_seqs + 1]
  std::span<const int32_t> seq_lens;         // [num_seqs]
  std::span<const int32_t> block_tables;     // [num_seqs, max_num_blocks_per_seq]
  int64_t max_num_blocks_per_seq = 0;
  std::span<float> out;  // [num_tokens, num_heads * head_dim] fp32
};

// Work is split over (sequence, kv head, chunk of queries) items on pool (nullptr: inline).
void paged_attention_ref(const PagedAttentionArgs& args, ThreadPool* pool);

}  // namespace s4kv::backend::cpu
