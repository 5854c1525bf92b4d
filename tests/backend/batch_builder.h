// Test helper: builds a ForwardBatch the way an engine's model runner would, one sequence at
// a time (its cached length, its new tokens, its block table), with slot_mapping derived from
// the block table. Owns the arrays the batch's spans point into.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"

namespace s4kv::backend::testing {

class BatchBuilder {
 public:
  BatchBuilder(int64_t block_size, int64_t max_num_blocks_per_seq)
      : block_size_(block_size), max_blocks_(max_num_blocks_per_seq) {
    query_start_loc_.push_back(0);
  }

  // Adds a sequence whose first num_computed tokens are already in the cache; returns the
  // token row of its first new token. block_table must cover num_computed + new tokens.
  // residual_slot: int4_kivi's residual slot of the sequence (-1: none, other dtypes).
  int32_t add(std::span<const int32_t> new_tokens, int64_t num_computed,
              std::span<const int32_t> block_table, int32_t residual_slot = -1) {
    if (residual_slot >= 0) residual_slots_.push_back(residual_slot);
    const auto first_row = static_cast<int32_t>(token_ids_.size());
    for (size_t j = 0; j < new_tokens.size(); ++j) {
      const int64_t pos = num_computed + static_cast<int64_t>(j);
      token_ids_.push_back(new_tokens[j]);
      positions_.push_back(static_cast<int32_t>(pos));
      slot_mapping_.push_back(block_table[static_cast<size_t>(pos / block_size_)] * block_size_ +
                              pos % block_size_);
    }
    query_start_loc_.push_back(static_cast<int32_t>(token_ids_.size()));
    seq_lens_.push_back(
        static_cast<int32_t>(num_computed + static_cast<int64_t>(new_tokens.size())));
    const size_t base = block_tables_.size();
    block_tables_.resize(base + static_cast<size_t>(max_blocks_), 0);
    std::copy_n(block_table.begin(),
                std::min<size_t>(block_table.size(), static_cast<size_t>(max_blocks_)),
                block_tables_.begin() + static_cast<std::ptrdiff_t>(base));
    return first_row;
  }

  void want_logits(int32_t row) { logits_indices_.push_back(row); }
  void want_all_logits() {
    for (int32_t i = 0; i < static_cast<int32_t>(token_ids_.size()); ++i)
      logits_indices_.push_back(i);
  }

  ForwardBatch batch() const {
    ForwardBatch b;
    b.token_ids = token_ids_;
    b.positions = positions_;
    b.query_start_loc = query_start_loc_;
    b.seq_lens = seq_lens_;
    b.block_tables = block_tables_;
    b.max_num_blocks_per_seq = max_blocks_;
    b.slot_mapping = slot_mapping_;
    b.logits_indices = logits_indices_;
    b.residual_slots = residual_slots_;
    return b;
  }

 private:
  int64_t block_size_;
  int64_t max_blocks_;
  std::vector<int32_t> token_ids_, positions_, query_start_loc_, seq_lens_, block_tables_;
  std::vector<int64_t> slot_mapping_;
  std::vector<int32_t> logits_indices_;
  std::vector<int32_t> residual_slots_;
};

}  // namespace s4kv::backend::testing
