#include "backend/forward_batch_builder.h"

#include <algorithm>

#include "common/check.h"

namespace s4kv::backend {

ForwardBatchBuilder::ForwardBatchBuilder(int64_t block_size, int64_t max_num_blocks_per_seq)
    : block_size_(block_size), max_blocks_(max_num_blocks_per_seq) {}

void ForwardBatchBuilder::reserve(size_t max_tokens, size_t max_seqs) {
  token_ids_.reserve(max_tokens);
  positions_.reserve(max_tokens);
  slot_mapping_.reserve(max_tokens);
  query_start_loc_.reserve(max_seqs + 1);
  seq_lens_.reserve(max_seqs);
  logits_indices_.reserve(max_seqs);
  seats_.reserve(max_seqs);
  seat_starts_.reserve(max_seqs);
  block_tables_.reserve(max_seqs * static_cast<size_t>(max_blocks_));
}

void ForwardBatchBuilder::clear() {
  token_ids_.clear();
  positions_.clear();
  slot_mapping_.clear();
  seq_lens_.clear();
  block_tables_.clear();
  logits_indices_.clear();
  seats_.clear();
  seat_starts_.clear();
  query_start_loc_.assign(1, 0);
}

int32_t ForwardBatchBuilder::add(std::span<const int32_t> new_tokens, int64_t num_computed,
                                 std::span<const int32_t> block_table, int32_t seat,
                                 int64_t seat_start) {
  S4KV_CHECK(static_cast<int64_t>(block_table.size()) <= max_blocks_,
             "batch: block table longer than max_num_blocks_per_seq");
  if (seat >= 0) {
    seats_.push_back(seat);
    seat_starts_.push_back(static_cast<int32_t>(seat_start));
  }
  const int32_t first_row = num_tokens();
  for (size_t j = 0; j < new_tokens.size(); ++j) {
    const int64_t pos = num_computed + static_cast<int64_t>(j);
    token_ids_.push_back(new_tokens[j]);
    positions_.push_back(static_cast<int32_t>(pos));
    slot_mapping_.push_back(block_table[static_cast<size_t>(pos / block_size_)] * block_size_ +
                            pos % block_size_);
  }
  query_start_loc_.push_back(num_tokens());
  seq_lens_.push_back(static_cast<int32_t>(num_computed + static_cast<int64_t>(new_tokens.size())));
  const size_t row = block_tables_.size();
  block_tables_.resize(row + static_cast<size_t>(max_blocks_), 0);
  std::copy(block_table.begin(), block_table.end(),
            block_tables_.begin() + static_cast<std::ptrdiff_t>(row));
  return first_row;
}

void ForwardBatchBuilder::want_all_logits() {
  for (int32_t i = 0; i < num_tokens(); ++i) logits_indices_.push_back(i);
}

ForwardBatch ForwardBatchBuilder::batch() const& {
  ForwardBatch b;
  b.token_ids = token_ids_;
  b.positions = positions_;
  b.query_start_loc = query_start_loc_;
  b.seq_lens = seq_lens_;
  b.block_tables = block_tables_;
  b.max_num_blocks_per_seq = max_blocks_;
  b.slot_mapping = slot_mapping_;
  b.logits_indices = logits_indices_;
  b.seats = seats_;
  b.seat_starts = seat_starts_;
  return b;
}

}  // namespace s4kv::backend
