// Test helper: random batch shapes for the attention plans' host tests.
#pragma once

#include <random>
#include <span>
#include <vector>

#include "backend/forward_batch_builder.h"

namespace s4kv::backend {

// A batch of num_seqs rows of random shape for the attention plans' host tests: each has
// 0..max_computed tokens in the cache and a query of one token one time in one_in, else of
// min_q..max_q tokens; its table all block 0 (the plans read no block ids). The batch is
// builder.batch() of the builder returned (it views the builder's arrays).
inline ForwardBatchBuilder random_prefill_rows(std::mt19937& rng, int64_t block_size, int num_seqs,
                                               int max_computed, int min_q, int max_q, int one_in) {
  const int64_t max_blocks = (max_computed + max_q) / block_size + 1;
  ForwardBatchBuilder builder(block_size, max_blocks);
  std::uniform_int_distribution<int> len(0, max_computed), q(min_q, max_q), coin(0, one_in - 1);
  const std::vector<int32_t> table(static_cast<size_t>(max_blocks), 0);
  for (int s = 0; s < num_seqs; ++s) {
    const int q_len = coin(rng) == 0 ? 1 : q(rng);
    const std::vector<int32_t> tokens(static_cast<size_t>(q_len), 1);
    const int computed = len(rng);
    builder.add(tokens, computed,
                std::span(table).first(
                    static_cast<size_t>((computed + q_len + block_size - 1) / block_size)));
  }
  return builder;
}

}  // namespace s4kv::backend
