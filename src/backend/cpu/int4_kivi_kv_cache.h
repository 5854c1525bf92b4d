// The CPU backend's int4_kivi KV cache (DESIGN.md "The int4_kivi KV format", docs/kv-format.md
// "The CPU backend"). Per layer:
//   pool      [num_blocks, num_kv_heads] int4 blocks of Int4KiviLayout (block_bytes each): the
//             full blocks, keys quantized before RoPE (after RoPE with int4_keys_post_rope);
//   residual  per seat (num_seats + 1, the dummy seat last) [2 (K, V), R * block_size,
//             num_kv_heads, head_dim] 16-bit in the pool's memory, ring_blocks pool blocks from
//             block ring_base + seat * ring_blocks (backend.h): each running sequence's partly
//             filled tail block, keys after RoPE, exactly the bits the 16-bit cache holds
//             (slot = ForwardBatch::seats[s]); with the window candidate (R = 2) also its last
//             full block. Position p is at row (p / B % R) * B + p % B: a ring of R blocks;
//   staging   [num_tokens, num_kv_heads, head_dim] 16-bit K and V of this step's new tokens
//             (per step, shared by the layers: kv_write fills it, kv_commit empties it).
//   sink      [num_sink_blocks + 1 (the dummy block, backend.h), 2 (K, V), block_size,
//             num_kv_heads, head_dim] 16-bit (with KvCacheConfig::sink_base_block >= 0 each in
//             its run of pool blocks instead, the same layout at the run's first byte): the
//             sink blocks (format v2: every sequence's first block, ids num_blocks ..
//             num_blocks + num_sink_blocks - 1 in its block table), exactly the 16-bit cache's
//             bits, never quantized.
// Invariant between steps: for a sequence of length L, its full blocks i < L / B are in the pool
// (or, for a sink id, in the sink area) at the block table's ids; positions [L / B * B, L) are
// in its residual slot, and with the window also block L / B - 1 when the slot holds it
// (it starts at or after ForwardBatch::seat_starts[s]), which attention then reads 16-bit. With
// the int4_value_hadamard candidate the pool's values are quantized after a Hadamard rotation and
// gather leaves them rotated (it returns their positions; attention rotates its output back).
//
// A step of q_len tokens, start = seq_len - q_len: attention reads blocks i < start / B from the
// pool (keys dequantized, rotated with the RoPE table; in place, int4_run, or via gather_range),
// positions [start / B * B, start) from the residual and [start, seq_len) from staging; kv_commit
// then quantizes every block that is full at seq_len and was not at start (keys rotated back in
// fp32 with the same table, from their 16-bit post-RoPE bits) and writes positions [seq_len / B *
// B, seq_len) to the residual.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "backend/cpu/cpu_kv_cache.h"
#include "backend/rope_table.h"
#include "kv/int4_kivi_layout.h"
#include "kv/kv_format.h"

namespace s4kv::backend::cpu {

class Int4KiviKvCache final : public CpuKvCache {
 public:
  // layout: from Int4KiviLayout::create(config.block_size, shape.head_dim, Gv);
  // inv_freq: [head_dim / 2]; config.num_seats > 0 (checked).
  Int4KiviKvCache(const KvCacheConfig& config, const CpuKvCacheShape& shape,
                  const kv::Int4KiviLayout& layout, std::span<const float> inv_freq);

  // Grows the RoPE table to the batch's longest sequence; checks that no two sequences share
  // a residual slot.
  void begin_step(const ForwardBatch& batch) override;
  void write(int64_t layer, const ForwardBatch& batch, std::span<const float> k,
             std::span<const float> v, int64_t row_stride) override;
  RotatedValues gather_range(int64_t layer, const ForwardBatch& batch, int64_t seq, int64_t kv_head,
                             int64_t begin, int64_t end, float* keys, float* values) const override;
  // The pool blocks after the sink block, up to the window (int4_pool_end): what gather_range
  // would dequantize. Empty where a sink id sits elsewhere (gather_range reads it) or head_dim
  // exceeds kInt4AttentionMaxHeadDim.
  Int4BlockRun int4_run(int64_t layer, const ForwardBatch& batch, int64_t seq,
                        int64_t kv_head) const override;
  void commit(int64_t layer, const ForwardBatch& batch, ThreadPool* pool) override;
  int64_t num_bytes() const override;
  KvStorageView storage(int64_t layer) const override;

  // For tests and tools: one pool block (layout().block_bytes) and one residual slot's K or V
  // ([ring * block_size, num_kv_heads, head_dim] 16-bit bits, rows as ring_row places them).
  std::span<const std::byte> block(int64_t layer, int64_t block_id, int64_t kv_head) const;
  std::span<const uint16_t> residual_k(int64_t layer, int64_t slot) const;
  std::span<const uint16_t> residual_v(int64_t layer, int64_t slot) const;
  const kv::Int4KiviLayout& layout() const { return layout_; }
  const RopeTable& rope_table() const { return rope_; }

 private:
  // Quantizes block `index` of sequence `seq` (full at seq_len) for one kv head into the pool.
  void quantize_block(int64_t layer, const ForwardBatch& batch, int64_t seq, int64_t index,
                      int64_t kv_head);
  // The 16-bit K/V row (slot_elems_) of position pos of a sequence in this step: residual for
  // pos < start, staging otherwise.
  const uint16_t* k_row(int64_t layer, const ForwardBatch& batch, int64_t seq, int64_t pos) const;
  const uint16_t* v_row(int64_t layer, const ForwardBatch& batch, int64_t seq, int64_t pos) const;
  uint16_t* residual(int64_t layer, int64_t slot, int which);  // which: 0 K, 1 V
  int64_t ring_row(int64_t pos) const {
    return pos / block_size_ % ring_ * block_size_ + pos % block_size_;
  }
  // One position's 16-bit K and V rows of one KV head ([head_dim] each) decoded to fp32.
  void decode_row(const uint16_t* k, const uint16_t* v, float* keys, float* values) const;
  bool is_sink(int32_t block_id) const { return block_id >= num_blocks_; }
  // Row t (< block_size) of a sink block (block_id >= num_blocks), all KV heads.
  uint16_t* sink_row(int64_t layer, int32_t block_id, int which, int64_t t);
  const uint16_t* sink_row(int64_t layer, int32_t block_id, int which, int64_t t) const {
    return const_cast<Int4KiviKvCache*>(this)->sink_row(layer, block_id, which, t);
  }

  struct FillItem {  // one block that filled in this step, one kv head
    int64_t seq, index, kv_head;
  };

  kv::Int4KiviLayout layout_;
  int64_t num_layers_, num_blocks_, num_slots_, num_sink_, block_size_, num_kv_heads_, head_dim_;
  int64_t ring_;        // residual blocks per slot: 1 + num_window_blocks
  int64_t slot_elems_;  // num_kv_heads * head_dim
  DType dtype_;
  bool keys_post_rope_;
  bool value_hadamard_;
  RopeTable rope_;
  int64_t ring_blocks_;              // pool blocks of one seat's ring
  int64_t ring_base_;                // the first seat's first pool block
  int64_t sink_base_, sink_run_;     // sink runs in the pool (sink_base_ < 0: in sink_)
  int64_t pool_blocks_;              // pool blocks a layer (int4_pool_blocks, backend.h)
  std::vector<std::byte> pool_;      // [num_layers, pool_blocks, num_kv_heads, block_bytes]
  std::vector<uint16_t> sink_;       // [num_layers, num_sink, 2 (K, V), block_size, slot_elems]
  std::vector<uint16_t> staging_k_;  // [num_tokens, slot_elems], grown to the largest step
  std::vector<uint16_t> staging_v_;
  std::vector<uint8_t> slot_used_;    // begin_step's check_distinct_seats scratch
  std::vector<FillItem> fill_items_;  // commit's work list, reused
};

}  // namespace s4kv::backend::cpu
