// ForwardBatchBuilder: owns the arrays a ForwardBatch points into and fills them one sequence
// at a time (its cached length, its new tokens, its block table), deriving positions,
// slot_mapping and the padded block-table row. The model runner, the fidelity evaluator and
// the backend tests build batches with it, so slot arithmetic lives in one place. Buffers are
// kept across clear() calls, so a steady-state step allocates nothing.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"

namespace s4kv::backend {

class ForwardBatchBuilder {
 public:
  ForwardBatchBuilder(int64_t block_size, int64_t max_num_blocks_per_seq);

  // Reserves room for batches of up to max_tokens tokens and max_seqs sequences.
  void reserve(size_t max_tokens, size_t max_seqs);
  // Empties the batch, keeping the buffers.
  void clear();

  // Adds a sequence whose first num_computed tokens are already in the cache; returns the
  // token row of its first new token. block_table must cover num_computed + new tokens and
  // hold at most max_num_blocks_per_seq ids. seat: int4_kivi's slot of the sequence
  // (-1: none, other dtypes); seat_start: the tokens it had computed when it took the slot
  // (ForwardBatch::seat_starts).
  int32_t add(std::span<const int32_t> new_tokens, int64_t num_computed,
              std::span<const int32_t> block_table, int32_t seat = -1, int64_t seat_start = 0);

  void want_logits(int32_t row) { logits_indices_.push_back(row); }
  void want_all_logits();
  int32_t num_tokens() const { return static_cast<int32_t>(token_ids_.size()); }
  size_t num_logits() const { return logits_indices_.size(); }

  // Spans into this builder: valid until the next add(), clear() or destruction. Not callable
  // on a temporary builder, whose spans would dangle at the end of the full expression.
  ForwardBatch batch() const&;
  ForwardBatch batch() const&& = delete;

 private:
  int64_t block_size_;
  int64_t max_blocks_;
  std::vector<int32_t> token_ids_, positions_, query_start_loc_{0}, seq_lens_, block_tables_;
  std::vector<int64_t> slot_mapping_;
  std::vector<int32_t> logits_indices_, seats_, seat_starts_;
};

}  // namespace s4kv::backend
