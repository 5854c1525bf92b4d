// Int4KiviKvCache::commit, the int4_kivi kv_commit step after a layer's attention: every block
// that became full in this step is quantized into the pool block its block table names (keys
// rotated back to pre-RoPE in fp32 from their 16-bit post-RoPE bits with the shared RoPE table,
// values widened exactly, both through the kv reference quantizer), then the partial tail goes
// to the sequence's residual slot. How a block was filled (one prefill, chunks, token by token)
// does not matter: it is quantized from the same 16-bit bits when its last token arrives.
// A sink block (format v2: a sequence's first block) is copied 16-bit to the sink area instead;
// with the int4_value_hadamard candidate the widened values are rotated before quantization.
#include <algorithm>
#include <vector>

#include "backend/cpu/int4_kivi_kv_cache.h"
#include "backend/cpu/paged_kv_cache.h"
#include "backend/cpu/thread_pool.h"
#include "common/check.h"
#include "kv/hadamard.h"
#include "kv/int4_kivi_ref.h"

namespace s4kv::backend::cpu {

void Int4KiviKvCache::quantize_block(int64_t layer, const ForwardBatch& batch, int64_t seq,
                                     int64_t index, int64_t kv_head) {
  const int64_t d = head_dim_;
  const int32_t block_id = batch.block_tables[seq * batch.max_num_blocks_per_seq + index];
  if (is_sink(block_id)) {  // a sink block stays 16-bit: copy its bits
    for (int64_t t = 0; t < block_size_; ++t) {
      const int64_t pos = index * block_size_ + t;
      std::copy_n(k_row(layer, batch, seq, pos) + kv_head * d, d,
                  sink_row(layer, block_id, 0, t) + kv_head * d);
      std::copy_n(v_row(layer, batch, seq, pos) + kv_head * d, d,
                  sink_row(layer, block_id, 1, t) + kv_head * d);
    }
    return;
  }
  thread_local std::vector<float> keys, values;
  keys.resize(static_cast<size_t>(block_size_ * d));
  values.resize(static_cast<size_t>(block_size_ * d));
  for (int64_t t = 0; t < block_size_; ++t) {
    const int64_t pos = index * block_size_ + t;
    const uint16_t* kr = k_row(layer, batch, seq, pos) + kv_head * d;
    const uint16_t* vr = v_row(layer, batch, seq, pos) + kv_head * d;
    float* k = keys.data() + t * d;
    for (int64_t c = 0; c < d; ++c) {
      k[c] = kv_decode(kr[c], dtype_);
      values[static_cast<size_t>(t * d + c)] = kv_decode(vr[c], dtype_);
    }
    if (!keys_post_rope_) rope_unrotate(k, k, rope_.cos(pos), rope_.sin(pos), d);
    if (value_hadamard_) {
      kv::hadamard_ref(std::span<float>(values.data() + t * d, static_cast<size_t>(d)));
    }
  }
  const auto view = block(layer, block_id, kv_head);
  const std::span<std::byte> out(const_cast<std::byte*>(view.data()), view.size());
  kv::quantize_block_ref(layout_, keys, values, out);
}

void Int4KiviKvCache::commit(int64_t layer, const ForwardBatch& batch, ThreadPool* pool) {
  std::vector<FillItem>& items = fill_items_;  // a member: pool threads read it
  items.clear();
  for (int64_t s = 0; s < batch.num_seqs(); ++s) {
    const int64_t seq_len = batch.seq_lens[s];
    const int64_t start = seq_len - (batch.query_start_loc[s + 1] - batch.query_start_loc[s]);
    for (int64_t i = start / block_size_; i < seq_len / block_size_; ++i) {
      for (int64_t g = 0; g < num_kv_heads_; ++g) items.push_back({s, i, g});
    }
  }
  // Items write distinct pool blocks and read the residual and staging only.
  const auto run = [&](int64_t i) {
    const FillItem& it = items[static_cast<size_t>(i)];
    quantize_block(layer, batch, it.seq, it.index, it.kv_head);
  };
  if (pool != nullptr) {
    pool->parallel_for(static_cast<int64_t>(items.size()), run);
  } else {
    for (int64_t i = 0; i < static_cast<int64_t>(items.size()); ++i) run(i);
  }

  // The tail [seq_len / B * B, seq_len), and with the window the last full block too: its new
  // tokens join what the residual already holds.
  for (int64_t s = 0; s < batch.num_seqs(); ++s) {
    const int64_t q_begin = batch.query_start_loc[s];
    const int64_t seq_len = batch.seq_lens[s];
    const int64_t start = seq_len - (batch.query_start_loc[s + 1] - q_begin);
    uint16_t* rk = residual(layer, batch.seats[s], 0);
    uint16_t* rv = residual(layer, batch.seats[s], 1);
    const int64_t kept = std::max<int64_t>(0, seq_len / block_size_ - (ring_ - 1)) * block_size_;
    for (int64_t p = std::max(start, kept); p < seq_len; ++p) {
      const auto src = static_cast<size_t>((q_begin + p - start) * slot_elems_);
      const int64_t dst = ring_row(p) * slot_elems_;
      std::copy_n(staging_k_.begin() + static_cast<std::ptrdiff_t>(src), slot_elems_, rk + dst);
      std::copy_n(staging_v_.begin() + static_cast<std::ptrdiff_t>(src), slot_elems_, rv + dst);
    }
  }
}

}  // namespace s4kv::backend::cpu
