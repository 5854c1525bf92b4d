#include "engine/model_runner.h"

#include <algorithm>

namespace s4kv::engine {

ModelRunner::ModelRunner(backend::Backend& backend, const ModelRunnerConfig& config)
    : backend_(backend), config_(config) {
  const backend::KvCacheConfig& kv = backend.kv_cache_config();
  S4KV_CHECK(config.max_num_seqs > 0 && config.max_num_batched_tokens > 0 &&
                 config.max_model_len > 0 && kv.block_size > 0,
             "model runner: bad config");
  block_size_ = kv.block_size;
  max_num_blocks_per_seq_ = (config.max_model_len + block_size_ - 1) / block_size_;
  uses_residual_slots_ = kv.dtype == kv::KvCacheDtype::kInt4Kivi;
  if (uses_residual_slots_) {
    S4KV_CHECK(kv.num_residual_slots >= config.max_num_seqs,
               "model runner: ", kv.num_residual_slots, " residual slots for ", config.max_num_seqs,
               " seats");
    // Highest first, so pop_back hands out slot 0 first (easier to read in a debugger).
    for (int32_t s = config.max_num_seqs - 1; s >= 0; --s) free_slots_.push_back(s);
  }
  // Each running request contributes at least one token, so num_seqs <= both limits.
  const auto max_tokens = static_cast<size_t>(config.max_num_batched_tokens);
  const auto max_seqs =
      static_cast<size_t>(std::min<int64_t>(config.max_num_seqs, config.max_num_batched_tokens));
  token_ids_.reserve(max_tokens);
  positions_.reserve(max_tokens);
  slot_mapping_.reserve(max_tokens);
  query_start_loc_.reserve(max_seqs + 1);
  seq_lens_.reserve(max_seqs);
  logits_indices_.reserve(max_seqs);
  residual_slots_.reserve(max_seqs);
  block_tables_.reserve(max_seqs * static_cast<size_t>(max_num_blocks_per_seq_));
  slot_of_.reserve(static_cast<size_t>(config.max_num_seqs));
}

void ModelRunner::release(RequestId id) {
  const auto it = slot_of_.find(id);
  if (it == slot_of_.end()) return;  // never ran (aborted while waiting) or 16-bit cache
  free_slots_.push_back(it->second);
  slot_of_.erase(it);
}

// A request keeps its slot across steps; a new (or resumed) one takes a free slot. Preempted
// and finished requests were released first, and at most max_num_seqs run, so one is free.
int32_t ModelRunner::slot_for(const ScheduledRequest& s) {
  if (!s.is_new) {
    const auto it = slot_of_.find(s.request_id);
    S4KV_CHECK(it != slot_of_.end(), "model runner: request ", s.request_id, " has no slot");
    return it->second;
  }
  S4KV_CHECK(!slot_of_.contains(s.request_id) && !free_slots_.empty(),
             "model runner: no residual slot for request ", s.request_id);
  const int32_t slot = free_slots_.back();
  free_slots_.pop_back();
  slot_of_.emplace(s.request_id, slot);
  return slot;
}

void ModelRunner::add_sequence(const ScheduledRequest& s) {
  const int64_t start = s.num_computed_tokens;
  const int64_t end = start + s.num_scheduled_tokens;
  S4KV_CHECK(static_cast<int64_t>(s.block_table.size()) <= max_num_blocks_per_seq_,
             "model runner: block table longer than max_model_len allows");
  for (int64_t pos = start; pos < end; ++pos) {
    token_ids_.push_back(s.token_ids[static_cast<size_t>(pos - start)]);
    positions_.push_back(static_cast<int32_t>(pos));
    const int64_t block = s.block_table[static_cast<size_t>(pos / block_size_)];
    slot_mapping_.push_back(block * block_size_ + pos % block_size_);
  }
  query_start_loc_.push_back(static_cast<int32_t>(token_ids_.size()));
  seq_lens_.push_back(static_cast<int32_t>(end));
  const size_t row = block_tables_.size();
  block_tables_.resize(row + static_cast<size_t>(max_num_blocks_per_seq_), 0);
  std::copy(s.block_table.begin(), s.block_table.end(),
            block_tables_.begin() + static_cast<std::ptrdiff_t>(row));
  // The logits of the chunk's last token predict the request's next token.
  if (s.samples) logits_indices_.push_back(static_cast<int32_t>(token_ids_.size()) - 1);
  if (uses_residual_slots_) residual_slots_.push_back(slot_for(s));
}

void ModelRunner::build_batch(const SchedulerOutput& out) {
  token_ids_.clear();
  positions_.clear();
  slot_mapping_.clear();
  seq_lens_.clear();
  block_tables_.clear();
  logits_indices_.clear();
  residual_slots_.clear();
  query_start_loc_.assign(1, 0);
  for (const ScheduledRequest& s : out.scheduled) add_sequence(s);
}

backend::ForwardBatch ModelRunner::batch_view() const {
  backend::ForwardBatch b;
  b.token_ids = token_ids_;
  b.positions = positions_;
  b.query_start_loc = query_start_loc_;
  b.seq_lens = seq_lens_;
  b.block_tables = block_tables_;
  b.max_num_blocks_per_seq = max_num_blocks_per_seq_;
  b.slot_mapping = slot_mapping_;
  b.logits_indices = logits_indices_;
  b.residual_slots = residual_slots_;
  return b;
}

void ModelRunner::execute(const SchedulerOutput& out, std::span<const SampleRow> rows,
                          Sampler& sampler, std::vector<SampleOutput>& sampled) {
  // Release before assigning: this step's newcomers may take the slots of requests that
  // finished or were preempted since the last step.
  for (RequestId id : out.finished_ids) release(id);
  for (RequestId id : out.preempted_ids) release(id);
  sampled.clear();
  if (out.scheduled.empty()) return;
  build_batch(out);
  S4KV_CHECK(rows.size() == logits_indices_.size(), "model runner: ", rows.size(),
             " sample rows for ", logits_indices_.size(), " sampling requests");
  const std::span<const float> logits = backend_.forward(batch_view());
  if (!rows.empty()) sampler.sample(logits, rows, sampled);
}

}  // namespace s4kv::engine
