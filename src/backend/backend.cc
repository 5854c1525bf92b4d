#include "backend/backend.h"

#include <algorithm>
#include <string>

#include "common/check.h"
#include "kv/int4_kivi_layout.h"

namespace s4kv::backend {

void check_distinct_seats(std::span<const int32_t> seats, int64_t dummy_seat,
                          std::vector<uint8_t>& seen) {
  seen.clear();
  for (int32_t seat : seats) {
    if (seat == dummy_seat) continue;  // padding sequences share it; what they write is never read
    const auto i = static_cast<size_t>(seat);
    if (i >= seen.size()) seen.resize(i + 1, 0);
    S4KV_CHECK(seen[i] == 0, "int4_kivi: residual slot ", seat,
               " given to two sequences of one batch");
    seen[i] = 1;
  }
}

void check_forward_batch(const ForwardBatch& b, const KvCacheConfig& kv, int64_t vocab_size,
                         int64_t num_deferred_rows) {
  const int64_t num_tokens = b.num_tokens();
  const int64_t num_seqs = b.num_seqs();
  S4KV_CHECK(num_tokens > 0 && num_seqs > 0, "forward: empty batch");
  S4KV_CHECK(static_cast<int64_t>(b.positions.size()) == num_tokens &&
                 static_cast<int64_t>(b.slot_mapping.size()) == num_tokens,
             "forward: positions/slot_mapping must have num_tokens entries");
  S4KV_CHECK(static_cast<int64_t>(b.query_start_loc.size()) == num_seqs + 1,
             "forward: query_start_loc must have num_seqs + 1 entries");
  S4KV_CHECK(b.max_num_blocks_per_seq > 0 &&
                 static_cast<int64_t>(b.block_tables.size()) == num_seqs * b.max_num_blocks_per_seq,
             "forward: block_tables must be [num_seqs, max_num_blocks_per_seq]");
  S4KV_CHECK(b.query_start_loc[0] == 0 && b.query_start_loc[num_seqs] == num_tokens,
             "forward: query_start_loc must run from 0 to num_tokens");
  for (int32_t id : b.token_ids) {
    S4KV_CHECK(id >= -num_deferred_rows && id < vocab_size, "forward: token id ", id,
               id < 0 ? " defers to a row the previous step did not sample" : "");
  }
  if (kv.dtype == kv::KvCacheDtype::kInt4Kivi || !b.seats.empty()) {
    S4KV_CHECK(static_cast<int64_t>(b.seats.size()) == num_seqs &&
                   static_cast<int64_t>(b.seat_starts.size()) == num_seqs,
               "forward: one seat and seat start per sequence (int4_kivi needs them)");
    for (int64_t s = 0; s < num_seqs; ++s) {
      const int64_t start = b.seq_lens[s] - (b.query_start_loc[s + 1] - b.query_start_loc[s]);
      S4KV_CHECK(b.seat_starts[s] >= 0 && b.seat_starts[s] <= start &&
                     b.seat_starts[s] % kv.block_size == 0,
                 "forward: seq ", s, " seat start ", b.seat_starts[s]);
    }
    for (int32_t seat : b.seats) {
      S4KV_CHECK(seat >= 0 && seat <= kv.dummy_seat(), "forward: seat ", seat);
    }
  } else {
    S4KV_CHECK(b.seat_starts.empty(), "forward: seat starts without seats");
  }
  if (kv.dtype != kv::KvCacheDtype::kInt4Kivi) {
    S4KV_CHECK(kv.num_sink_blocks == 0, "forward: sink blocks are for int4_kivi only");
  }
  for (int32_t row : b.logits_indices) {
    S4KV_CHECK(row >= 0 && row < num_tokens, "forward: logits index ", row);
  }
  S4KV_CHECK(b.sampling.empty() || b.sampling.size() == b.logits_indices.size(),
             "forward: ", b.sampling.size(), " sampling rows for ", b.logits_indices.size(),
             " logits rows");
  S4KV_CHECK(!b.return_logits || !b.sampling.empty(), "forward: return_logits without sampling");
  for (const SamplingRow& r : b.sampling) check_sampling_row(r, vocab_size);
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int64_t q_begin = b.query_start_loc[s];
    const int64_t q_len = b.query_start_loc[s + 1] - q_begin;
    const int64_t seq_len = b.seq_lens[s];
    S4KV_CHECK(q_len > 0 && seq_len >= q_len, "forward: seq ", s, " q_len ", q_len, " seq_len ",
               seq_len);
    S4KV_CHECK(seq_len <= b.max_num_blocks_per_seq * kv.block_size, "forward: seq ", s,
               " longer than its block table");
    const int32_t* table = b.block_tables.data() + s * b.max_num_blocks_per_seq;
    const bool padding =
        b.seats.empty() ? table[0] == kv.dummy_block() : b.seats[s] == kv.dummy_seat();
    for (int64_t i = 0; padding && i < (seq_len + kv.block_size - 1) / kv.block_size; ++i) {
      S4KV_CHECK(table[i] == kv.dummy_block(), "forward: padding seq ", s, " block ", i, " id ",
                 table[i], " is not the dummy block");
    }
    for (int64_t i = 0; !padding && i < (seq_len + kv.block_size - 1) / kv.block_size; ++i) {
      // A sink block first when the cache has them, pool blocks after it.
      const bool sink = i == 0 && kv.num_sink_blocks > 0;
      const int64_t lo = sink ? kv.num_blocks : 0;
      const int64_t hi = sink ? kv.num_blocks + kv.num_sink_blocks : kv.num_blocks;
      S4KV_CHECK(table[i] >= lo && table[i] < hi, "forward: seq ", s, " block ", i, " id ",
                 table[i], sink ? " is not a sink block" : "");
    }
    for (int64_t j = 0; j < q_len; ++j) {
      const int64_t t = q_begin + j;
      const int64_t pos = seq_len - q_len + j;
      S4KV_CHECK(b.positions[t] == pos, "forward: token ", t, " position ", b.positions[t],
                 " expected ", pos);
      const int64_t slot = table[pos / kv.block_size] * kv.block_size + pos % kv.block_size;
      S4KV_CHECK(b.slot_mapping[t] == slot, "forward: token ", t, " slot ", b.slot_mapping[t],
                 " disagrees with its block table (", slot, ")");
    }
  }
}

Status check_kv_cache_shape(const KvCacheConfig& kv, int64_t head_dim) {
  const bool int4 = kv.dtype == kv::KvCacheDtype::kInt4Kivi;
  if (!int4 && (kv.num_sink_blocks != 0 || kv.num_window_blocks != 0 || kv.int4_value_hadamard)) {
    return invalid_argument(
        "sink blocks, window blocks and Hadamard values need kv_cache_dtype int4_kivi");
  }
  if (kv.num_window_blocks < 0 || kv.num_window_blocks > 1) {
    return invalid_argument("int4_kivi: num_window_blocks must be 0 or 1 (got " +
                            std::to_string(kv.num_window_blocks) + ")");
  }
  if (kv.num_sink_blocks < 0) {
    return invalid_argument("int4_kivi: num_sink_blocks must be >= 0 (got " +
                            std::to_string(kv.num_sink_blocks) + ")");
  }
  const kv::Int4KiviVariant variant{.sink_blocks = kv.num_sink_blocks > 0 ? 1 : 0,
                                    .window_blocks = static_cast<int>(kv.num_window_blocks),
                                    .value_hadamard = kv.int4_value_hadamard};
  if (Status s = kv::validate_int4_variant(variant, head_dim); !s.is_ok()) {
    return invalid_argument(s.message());
  }
  if (int4) {
    auto layout =
        kv::Int4KiviLayout::create(static_cast<int>(kv.block_size), static_cast<int>(head_dim),
                                   static_cast<int>(kv.value_group_size));
    if (!layout.is_ok()) return layout.status();
    if (kv.num_seats <= 0) {
      return invalid_argument("int4_kivi: num_seats must be positive (got " +
                              std::to_string(kv.num_seats) + ")");
    }
    // The seats' rings after the block ids, or all of them within (the dummy seat's after).
    const int64_t rings = int4_ring_blocks(kv, *layout) * kv.num_seats;
    if (kv.ring_base_block >= 0 && kv.ring_base_block < kv.num_blocks &&
        kv.ring_base_block + rings != kv.num_blocks) {
      return invalid_argument(
          "int4_kivi: the seats' rings from block " + std::to_string(kv.ring_base_block) +
          " take " + std::to_string(rings) + " blocks, not the " +
          std::to_string(kv.num_blocks - kv.ring_base_block) + " up to num_blocks");
    }
    // Sink runs: each long enough for a 16-bit block, all of them (the dummy block's too)
    // below the seats' rings.
    if (kv.sink_base_block >= 0) {
      const int64_t end = kv.sink_runs_end();
      if (kv.num_sink_blocks == 0) {
        return invalid_argument("int4_kivi: sink_base_block without sink blocks");
      }
      if (kv.sink_run_blocks < layout->ring_blocks(1)) {
        return invalid_argument("int4_kivi: sink runs of " + std::to_string(kv.sink_run_blocks) +
                                " blocks; a 16-bit block needs " +
                                std::to_string(layout->ring_blocks(1)));
      }
      if (end > kv.ring_base()) {
        return invalid_argument("int4_kivi: the sink runs from block " +
                                std::to_string(kv.sink_base_block) + " end at " +
                                std::to_string(end) + ", past the seats' rings at " +
                                std::to_string(kv.ring_base()));
      }
    }
  } else if (kv.ring_base_block >= 0 || kv.sink_base_block >= 0) {
    return invalid_argument("ring_base_block and sink_base_block are for int4_kivi");
  }
  if (kv.block_size <= 0) {
    return invalid_argument("block_size must be positive (got " + std::to_string(kv.block_size) +
                            ")");
  }
  return Status::ok();
}

bool resolve_deferred_tokens(std::span<const int32_t> token_ids,
                             std::span<const int32_t> prev_sampled, std::vector<int32_t>& out) {
  if (std::none_of(token_ids.begin(), token_ids.end(), [](int32_t id) { return id < 0; })) {
    return false;
  }
  out.assign(token_ids.begin(), token_ids.end());
  for (int32_t& id : out) {
    if (id >= 0) continue;
    const auto row = static_cast<size_t>(-1 - static_cast<int64_t>(id));
    S4KV_CHECK(row < prev_sampled.size(), "forward: deferred token of row ", row, " but the ",
               "previous step sampled ", prev_sampled.size(), " rows");
    id = prev_sampled[row];
  }
  return true;
}

void SynchronousBackend::submit(const ForwardBatch& in) {
  S4KV_CHECK(in_flight_ < kMaxInFlight, "backend: more than ", kMaxInFlight,
             " steps submitted without wait()");
  if (in_flight_ == 1) {  // run() is about to reuse the buffers the pending step points into
    next_kept_ ^= 1;
    StepOutput& p = pending_[0];
    kept_logits_[next_kept_].assign(p.logits.begin(), p.logits.end());
    kept_samples_[next_kept_].assign(p.samples.begin(), p.samples.end());
    if (!p.logits.empty()) p.logits = kept_logits_[next_kept_];
    if (!p.samples.empty()) p.samples = kept_samples_[next_kept_];
  }
  ForwardBatch batch = in;
  if (resolve_deferred_tokens(in.token_ids, last_sampled_, resolved_)) batch.token_ids = resolved_;
  const StepOutput out = run(batch);
  last_sampled_.clear();
  for (const SampleOutput& s : out.samples) last_sampled_.push_back(s.token_id);
  pending_[in_flight_++] = out;
}

StepOutput SynchronousBackend::wait() {
  S4KV_CHECK(in_flight_ > 0, "backend: wait() without a submitted step");
  const StepOutput out = pending_[0];
  pending_[0] = pending_[1];
  --in_flight_;
  return out;
}

StepOutput HostSamplingBackend::run(const ForwardBatch& batch) {
  const std::span<const float> logits = run_logits(batch);
  if (batch.sampling.empty()) return {logits, {}};
  S4KV_CHECK(batch.sampling.size() == batch.logits_indices.size(),
             "backend: ", batch.sampling.size(), " sampling rows for ", batch.logits_indices.size(),
             " logits rows");
  sampler_.sample(logits, batch.sampling, samples_);
  return {batch.return_logits ? logits : std::span<const float>{}, samples_};
}

}  // namespace s4kv::backend
