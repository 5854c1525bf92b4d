#include "engine/model_runner.h"

#include <algorithm>
#include <chrono>
#include <climits>

namespace s4kv::engine {

ModelRunner::ModelRunner(backend::Backend& backend, const ModelRunnerConfig& config)
    : backend_(backend),
      config_(config),
      block_size_(backend.kv_cache_config().block_size),
      max_num_blocks_per_seq_(
          block_size_ > 0 ? (config.max_model_len + block_size_ - 1) / block_size_ : 0),
      batch_(block_size_, max_num_blocks_per_seq_) {
  const backend::KvCacheConfig& kv = backend.kv_cache_config();
  S4KV_CHECK(config.max_num_seqs > 0 && config.max_num_batched_tokens > 0 &&
                 config.max_model_len > 0 && kv.block_size > 0,
             "model runner: bad config");
  // Seats for every dtype whose cache has them (int4_kivi must: its residual rings live there).
  uses_seats_ = kv.num_seats > 0;
  S4KV_CHECK(uses_seats_ || kv.dtype != kv::KvCacheDtype::kInt4Kivi,
             "model runner: an int4_kivi cache without seats");
  if (uses_seats_) {
    S4KV_CHECK(kv.num_seats >= config.max_num_seqs, "model runner: ", kv.num_seats, " seats for ",
               config.max_num_seqs, " sequences");
    slot_held_.assign(static_cast<size_t>(config.max_num_seqs), 0);
  }
  // Each running request contributes at least one token, so num_seqs <= both limits.
  const auto max_tokens = static_cast<size_t>(config.max_num_batched_tokens);
  const auto max_seqs =
      static_cast<size_t>(std::min<int64_t>(config.max_num_seqs, config.max_num_batched_tokens));
  batch_.reserve(max_tokens, max_seqs);
  slot_of_.reserve(static_cast<size_t>(config.max_num_seqs));
  rows_.reserve(max_seqs);
  prev_rows_.reserve(max_seqs);
}

void ModelRunner::release(RequestId id) {
  const auto it = slot_of_.find(id);
  if (it == slot_of_.end()) return;  // never ran (aborted while waiting), or no seats
  slot_held_[static_cast<size_t>(it->second.slot)] = 0;
  slot_of_.erase(it);
}

// A request keeps its slot across steps; a new (or resumed) one takes the seat the scheduler
// gave it, which preempted and finished requests released first. A new request's slot holds its
// K/V from the tokens it starts at (a prefix-cache hit's length).
ModelRunner::Seat ModelRunner::slot_for(const ScheduledRequest& s) {
  if (!s.is_new) {
    const auto it = slot_of_.find(s.request_id);
    S4KV_CHECK(it != slot_of_.end() && it->second.slot == s.seat, "model runner: request ",
               s.request_id, " has no slot, or not seat ", s.seat);
    return it->second;
  }
  S4KV_CHECK(!slot_of_.contains(s.request_id) && s.seat >= 0 && s.seat < config_.max_num_seqs &&
                 !slot_held_[static_cast<size_t>(s.seat)],
             "model runner: request ", s.request_id, " given seat ", s.seat,
             " (taken, or outside 0..", config_.max_num_seqs - 1, ")");
  const Seat seat{s.seat, s.num_computed_tokens};
  slot_held_[static_cast<size_t>(s.seat)] = 1;
  slot_of_.emplace(s.request_id, seat);
  return seat;
}

int32_t ModelRunner::prev_row(RequestId id) const {
  const auto it = std::lower_bound(prev_rows_.begin(), prev_rows_.end(),
                                   std::pair<RequestId, int32_t>{id, INT32_MIN});
  S4KV_CHECK(it != prev_rows_.end() && it->first == id, "model runner: request ", id,
             " has a placeholder but did not sample in the previous step");
  return it->second;
}

void ModelRunner::add_sequence(const ScheduledRequest& s) {
  S4KV_CHECK(static_cast<int64_t>(s.block_table.size()) <= max_num_blocks_per_seq_,
             "model runner: block table longer than max_model_len allows");
  const Seat seat = uses_seats_ ? slot_for(s) : Seat{};
  std::span<const int32_t> tokens = s.token_ids;
  if (!tokens.empty() && tokens.back() == kPlaceholderTokenId) {
    // The token the previous step samples for this request, resolved by the backend.
    tokens_.assign(tokens.begin(), tokens.end());
    tokens_.back() = -1 - prev_row(s.request_id);
    tokens = tokens_;
  }
  batch_.add(tokens, s.num_computed_tokens, s.block_table, seat.slot, seat.start);
  // The logits of the chunk's last token predict the request's next token.
  if (s.samples) {
    rows_.emplace_back(s.request_id, static_cast<int32_t>(batch_.num_logits()));
    batch_.want_logits(batch_.num_tokens() - 1);
  }
}

void ModelRunner::build_batch(const SchedulerOutput& out) {
  batch_.clear();
  prev_rows_.swap(rows_);
  rows_.clear();
  for (const ScheduledRequest& s : out.scheduled) add_sequence(s);
  std::sort(rows_.begin(), rows_.end());
}

bool ModelRunner::submit(const SchedulerOutput& out, std::span<const SampleRow> rows,
                         Sampler& sampler) {
  // Release before assigning: this step's newcomers may take the slots of requests that
  // finished or were preempted since the last step.
  for (RequestId id : out.finished_ids) release(id);
  for (RequestId id : out.preempted_ids) release(id);
  if (out.scheduled.empty()) return false;
  build_batch(out);
  S4KV_CHECK(rows.size() == batch_.num_logits(), "model runner: ", rows.size(), " sample rows for ",
             batch_.num_logits(), " sampling requests");
  backend::ForwardBatch batch = batch_.batch();
  batch.sampling = sampler.lower(rows);
  backend_.submit(batch);
  return true;
}

std::span<const SampleOutput> ModelRunner::wait() {
  const auto start = std::chrono::steady_clock::now();
  const backend::StepOutput out = backend_.wait();
  wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out.samples;
}

}  // namespace s4kv::engine
