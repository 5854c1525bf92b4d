// Int4KiviKvCache: storage, kv_write (staging) and attention's gather. kv_commit (quantize on
// fill) is in int4_kivi_commit.cc.
#include "backend/cpu/int4_kivi_kv_cache.h"

#include <algorithm>

#include "backend/cpu/gemm16.h"
#include "backend/cpu/int4_attention.h"
#include "backend/cpu/int4_dequant.h"
#include "backend/cpu/paged_kv_cache.h"
#include "common/check.h"
#include "kv/int4_kivi_ref.h"

namespace s4kv::backend::cpu {

Int4KiviKvCache::Int4KiviKvCache(const KvCacheConfig& config, const CpuKvCacheShape& shape,
                                 const kv::Int4KiviLayout& layout, std::span<const float> inv_freq)
    : layout_(layout),
      num_layers_(shape.num_layers),
      num_blocks_(config.num_blocks),
      num_slots_(config.num_seats + 1),       // the last: the dummy seat
      num_sink_(config.num_sink_blocks + 1),  // the last: the dummy block
      block_size_(config.block_size),
      num_kv_heads_(shape.num_kv_heads),
      head_dim_(shape.head_dim),
      ring_(1 + config.num_window_blocks),
      slot_elems_(shape.num_kv_heads * shape.head_dim),
      dtype_(shape.dtype),
      keys_post_rope_(config.int4_keys_post_rope),
      value_hadamard_(config.int4_value_hadamard),
      rope_(inv_freq),
      ring_blocks_(int4_ring_blocks(config, layout)),
      ring_base_(config.ring_base()),
      sink_base_(config.sink_base_block),
      sink_run_(config.sink_run_blocks),
      pool_blocks_(int4_pool_blocks(config, layout)) {
  S4KV_CHECK(
      num_layers_ > 0 && num_blocks_ > 0 && num_slots_ > 0 && num_sink_ >= 0 && num_kv_heads_ > 0,
      "Int4KiviKvCache: non-positive dimension");
  S4KV_CHECK(layout.block_size == block_size_ && layout.head_dim == head_dim_ &&
                 layout.value_group_size == config.value_group_size,
             "Int4KiviKvCache: layout does not match the config");
  S4KV_CHECK(dtype_ == DType::kBF16 || dtype_ == DType::kF16, "Int4KiviKvCache: 16-bit dtype");
  pool_.assign(static_cast<size_t>(num_layers_ * pool_blocks_ * num_kv_heads_) * layout.block_bytes,
               std::byte{0});
  if (sink_base_ < 0) {
    sink_.assign(static_cast<size_t>(num_layers_ * num_sink_ * 2 * block_size_ * slot_elems_), 0);
  } else {  // sink runs in the pool (backend.h): each holds a sink block, all inside the pool
    S4KV_CHECK(static_cast<size_t>(sink_run_ * num_kv_heads_) * layout.block_bytes >=
                       static_cast<size_t>(2 * block_size_ * slot_elems_) * sizeof(uint16_t) &&
                   config.sink_runs_end() <= pool_blocks_,
               "Int4KiviKvCache: sink runs of ", sink_run_, " blocks from block ", sink_base_);
  }
  S4KV_CHECK(!value_hadamard_ || (head_dim_ & (head_dim_ - 1)) == 0,
             "Int4KiviKvCache: Hadamard values need a power-of-two head_dim");
}

void Int4KiviKvCache::begin_step(const ForwardBatch& batch) {
  const int32_t max_len = *std::max_element(batch.seq_lens.begin(), batch.seq_lens.end());
  rope_.ensure(max_len);
  check_distinct_seats(batch.seats, num_slots_ - 1 /* the dummy seat */, slot_used_);
}

void Int4KiviKvCache::write(int64_t layer, const ForwardBatch& batch, std::span<const float> k,
                            std::span<const float> v, int64_t row_stride) {
  S4KV_CHECK(layer >= 0 && layer < num_layers_, "int4_kivi kv_write: layer ", layer);
  const int64_t n = batch.num_tokens();
  S4KV_CHECK(static_cast<int64_t>(k.size()) >= (n - 1) * row_stride + slot_elems_ &&
                 static_cast<int64_t>(v.size()) >= (n - 1) * row_stride + slot_elems_,
             "int4_kivi kv_write: k/v too small");
  if (staging_k_.size() < static_cast<size_t>(n * slot_elems_)) {
    staging_k_.resize(static_cast<size_t>(n * slot_elems_));
    staging_v_.resize(static_cast<size_t>(n * slot_elems_));
  }
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t i = 0; i < slot_elems_; ++i) {
      staging_k_[static_cast<size_t>(t * slot_elems_ + i)] =
          kv_encode(k[t * row_stride + i], dtype_);
      staging_v_[static_cast<size_t>(t * slot_elems_ + i)] =
          kv_encode(v[t * row_stride + i], dtype_);
    }
  }
}

RotatedValues Int4KiviKvCache::gather_range(int64_t layer, const ForwardBatch& batch, int64_t seq,
                                            int64_t kv_head, int64_t begin, int64_t end,
                                            float* keys, float* values) const {
  S4KV_CHECK(0 <= begin && begin <= end && end <= batch.seq_lens[seq], "int4_kivi gather: [", begin,
             ", ", end, ")");
  const int32_t* table = batch.block_tables.data() + seq * batch.max_num_blocks_per_seq;
  const int64_t d = head_dim_, B = block_size_;
  const auto block_elems = static_cast<size_t>(B * d);
  // Blocks before `from_pool_end` are pool or sink blocks; the window and the tail after them
  // are read 16-bit from the slot.
  const int64_t from_pool_end = int4_pool_end(batch, seq, B, static_cast<int>(ring_), num_blocks_);
  int64_t num_sink = 0;  // full sink blocks: 16-bit, as the 16-bit cache holds them
  for (int64_t i = 0; i < from_pool_end; ++i) num_sink += is_sink(table[i]) ? 1 : 0;
  auto row = [&](float* base, int64_t p) {
    return base == nullptr ? nullptr : base + (p - begin) * d;
  };
  thread_local std::vector<float> part;  // a pool block only partly inside [begin, end)
  for (int64_t i = begin / B; i < std::min(from_pool_end, (end + B - 1) / B); ++i) {
    const int64_t p0 = std::max(begin, i * B), p1 = std::min(end, (i + 1) * B);
    if (is_sink(table[i])) {
      for (int64_t p = p0; p < p1; ++p) {
        decode_row(sink_row(layer, table[i], 0, p - i * B) + kv_head * d,
                   sink_row(layer, table[i], 1, p - i * B) + kv_head * d, row(keys, p),
                   row(values, p));
      }
      continue;
    }
    const auto blk = block(layer, table[i], kv_head);
    const bool whole = p0 == i * B && p1 == (i + 1) * B;
    for (int kv = 0; kv < 2; ++kv) {
      float* out = kv == 0 ? keys : values;
      if (out == nullptr) continue;
      if (!whole) part.resize(block_elems);
      float* dst = whole ? row(out, p0) : part.data();
      if (kv == 0) {
        dequantize_keys_block(cpu_isa(), layout_, blk, std::span<float>(dst, block_elems));
        for (int64_t t = 0; t < B && !keys_post_rope_; ++t) {
          const int64_t pos = i * B + t;
          rope_rotate(dst + t * d, dst + t * d, rope_.cos(pos), rope_.sin(pos), d);
        }
      } else {
        dequantize_values_block(cpu_isa(), layout_, blk, std::span<float>(dst, block_elems));
      }
      if (!whole) {
        std::copy_n(part.data() + (p0 - i * B) * d, (p1 - p0) * d, row(out, p0));
      }
    }
  }
  for (int64_t p = std::max(begin, from_pool_end * B); p < end; ++p) {
    decode_row(k_row(layer, batch, seq, p) + kv_head * d, v_row(layer, batch, seq, p) + kv_head * d,
               row(keys, p), row(values, p));
  }
  if (!value_hadamard_) return {};
  // The sink block, when there is one, is table index 0: the rotated (pool) rows follow it.
  const int64_t rb = std::max(begin, num_sink * B);
  const int64_t re = std::min(end, std::max(num_sink, from_pool_end) * B);
  return rb < re ? RotatedValues{rb, re} : RotatedValues{};
}

Int4BlockRun Int4KiviKvCache::int4_run(int64_t layer, const ForwardBatch& batch, int64_t seq,
                                       int64_t kv_head) const {
  S4KV_CHECK(layer >= 0 && layer < num_layers_ && kv_head >= 0 && kv_head < num_kv_heads_,
             "int4_kivi int4_run: layer ", layer, " head ", kv_head);
  if (head_dim_ > kInt4AttentionMaxHeadDim) return {};
  const int32_t* table = batch.block_tables.data() + seq * batch.max_num_blocks_per_seq;
  const int64_t end = int4_pool_end(batch, seq, block_size_, static_cast<int>(ring_), num_blocks_);
  const int64_t first = end > 0 && is_sink(table[0]) ? 1 : 0;
  for (int64_t i = first; i < end; ++i) {
    S4KV_CHECK(table[i] >= 0, "int4_kivi int4_run: block id ", table[i]);
    if (is_sink(table[i])) return {};
  }
  const size_t stride = static_cast<size_t>(num_kv_heads_) * layout_.block_bytes;
  return {.layout = &layout_,
          .base = pool_.data() + static_cast<size_t>(layer * pool_blocks_) * stride +
                  static_cast<size_t>(kv_head) * layout_.block_bytes,
          .block_stride = stride,
          .table = table,
          .first = first,
          .end = end,
          .rope = keys_post_rope_ ? nullptr : &rope_,
          .values_rotated = value_hadamard_};
}

const uint16_t* Int4KiviKvCache::k_row(int64_t layer, const ForwardBatch& batch, int64_t seq,
                                       int64_t pos) const {
  const int64_t q_begin = batch.query_start_loc[seq];
  const int64_t start = batch.seq_lens[seq] - (batch.query_start_loc[seq + 1] - q_begin);
  if (pos >= start) return staging_k_.data() + (q_begin + pos - start) * slot_elems_;
  return residual_k(layer, batch.seats[seq]).data() + ring_row(pos) * slot_elems_;
}

const uint16_t* Int4KiviKvCache::v_row(int64_t layer, const ForwardBatch& batch, int64_t seq,
                                       int64_t pos) const {
  const int64_t q_begin = batch.query_start_loc[seq];
  const int64_t start = batch.seq_lens[seq] - (batch.query_start_loc[seq + 1] - q_begin);
  if (pos >= start) return staging_v_.data() + (q_begin + pos - start) * slot_elems_;
  return residual_v(layer, batch.seats[seq]).data() + ring_row(pos) * slot_elems_;
}

std::span<const std::byte> Int4KiviKvCache::block(int64_t layer, int64_t block_id,
                                                  int64_t kv_head) const {
  S4KV_CHECK(layer >= 0 && layer < num_layers_ && block_id >= 0 && block_id < num_blocks_ &&
                 kv_head >= 0 && kv_head < num_kv_heads_,
             "int4_kivi: block ", block_id, " head ", kv_head, " of layer ", layer);
  const auto index =
      static_cast<size_t>((layer * pool_blocks_ + block_id) * num_kv_heads_ + kv_head);
  return std::span<const std::byte>(pool_).subspan(index * layout_.block_bytes,
                                                   layout_.block_bytes);
}

std::span<const uint16_t> Int4KiviKvCache::residual_k(int64_t layer, int64_t slot) const {
  return std::span<const uint16_t>(const_cast<Int4KiviKvCache*>(this)->residual(layer, slot, 0),
                                   static_cast<size_t>(ring_ * block_size_ * slot_elems_));
}

std::span<const uint16_t> Int4KiviKvCache::residual_v(int64_t layer, int64_t slot) const {
  return std::span<const uint16_t>(const_cast<Int4KiviKvCache*>(this)->residual(layer, slot, 1),
                                   static_cast<size_t>(ring_ * block_size_ * slot_elems_));
}

void Int4KiviKvCache::decode_row(const uint16_t* k, const uint16_t* v, float* keys,
                                 float* values) const {
  // gemm16's exact widening (kv_decode's values, in vector registers).
  const bool bf16 = dtype_ == DType::kBF16;
  if (keys != nullptr) widen16(cpu_isa(), k, bf16, head_dim_, keys);
  if (values != nullptr) widen16(cpu_isa(), v, bf16, head_dim_, values);
}

uint16_t* Int4KiviKvCache::sink_row(int64_t layer, int32_t block_id, int which, int64_t t) {
  const int64_t sink = block_id - num_blocks_;
  S4KV_CHECK(layer >= 0 && layer < num_layers_ && sink >= 0 && sink < num_sink_ && t >= 0 &&
                 t < block_size_,
             "int4_kivi: row ", t, " of sink block ", block_id, " layer ", layer);
  const int64_t row = (which * block_size_ + t) * slot_elems_;
  if (sink_base_ >= 0) {
    const auto block =
        static_cast<size_t>((layer * pool_blocks_ + sink_base_ + sink * sink_run_) * num_kv_heads_);
    return reinterpret_cast<uint16_t*>(pool_.data() + block * layout_.block_bytes) + row;
  }
  return sink_.data() + (layer * num_sink_ + sink) * 2 * block_size_ * slot_elems_ + row;
}

uint16_t* Int4KiviKvCache::residual(int64_t layer, int64_t slot, int which) {
  S4KV_CHECK(layer >= 0 && layer < num_layers_ && slot >= 0 && slot < num_slots_,
             "int4_kivi: residual slot ", slot, " of layer ", layer);
  const size_t block = static_cast<size_t>(
      (layer * pool_blocks_ + ring_base_ + slot * ring_blocks_) * num_kv_heads_);
  return reinterpret_cast<uint16_t*>(pool_.data() + block * layout_.block_bytes) +
         which * ring_ * block_size_ * slot_elems_;
}

KvStorageView Int4KiviKvCache::storage(int64_t layer) const {
  S4KV_CHECK(layer >= 0 && layer < num_layers_, "int4_kivi storage: layer ", layer);
  const auto l = static_cast<size_t>(layer);
  const auto pool = static_cast<size_t>(pool_blocks_ * num_kv_heads_) * layout_.block_bytes;
  const auto block = static_cast<size_t>(num_kv_heads_) * layout_.block_bytes;
  const auto sink = static_cast<size_t>(num_sink_ * 2 * block_size_ * slot_elems_);
  const auto res_begin = static_cast<size_t>(ring_base_) * block;
  return {.pool = std::span<const std::byte>(pool_).subspan(l * pool, pool),
          .residual = std::span<const std::byte>(pool_).subspan(
              l * pool + res_begin, static_cast<size_t>(ring_blocks_ * num_slots_) * block),
          .seat_stride = static_cast<int64_t>(ring_blocks_) * static_cast<int64_t>(block),
          // (empty with sink runs: the sinks are in the pool's bytes)
          .sink = sink_.empty()
                      ? std::span<const std::byte>()
                      : std::as_bytes(std::span<const uint16_t>(sink_).subspan(l * sink, sink)),
          .staging_k = std::as_bytes(std::span<const uint16_t>(staging_k_)),
          .staging_v = std::as_bytes(std::span<const uint16_t>(staging_v_))};
}

int64_t Int4KiviKvCache::num_bytes() const {
  return static_cast<int64_t>(pool_.size() + sink_.size() * sizeof(uint16_t));
}

}  // namespace s4kv::backend::cpu
