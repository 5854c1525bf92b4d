// The engine's side of sampling: each row's request settings (SamplingParams) lowered into the
// backend's SamplingRow (backend/sampling.h holds the steps, their order, the logprobs semantics
// and the counter-based draws); the backend samples them on its device (Backend::submit).
// Engine thread only; owns the lowered rows' storage (nothing is allocated per step once warm).
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "backend/sampling.h"
#include "engine/sampling_params.h"

namespace s4kv::engine {

using backend::SampleOutput;
using backend::TokenLogprob;

static_assert(kMaxLogprobs == backend::kMaxTopLogprobs);

// What one sequence needs sampled this step. Spans are read while its lowered row lives.
struct SampleRow {
  const SamplingParams* params = nullptr;
  std::span<const int32_t> prompt_token_ids;  // for repetition_penalty
  std::span<const int32_t> output_token_ids;  // generated so far, before this step
  uint64_t rng_key = 0;                       // the sequence's stream (SequenceKeySource)
  int64_t num_output_placeholders = 0;        // sampled by steps in flight (SamplingRow's)
};

// The lowered row's own lists: its logit_bias clamped to +-kMaxLogitBias, and the ids masked
// below min_tokens (stop_token_ids, then the EOS ids).
struct LoweredRow {
  std::vector<std::pair<int32_t, float>> logit_bias;
  std::vector<int32_t> min_tokens_masked_ids;
};
// The row's spans point into `storage` and into row's spans: valid while both live unchanged.
backend::SamplingRow lower(const SampleRow& row, std::span<const int32_t> eos_token_ids,
                           LoweredRow& storage);

class Sampler {
 public:
  // eos_token_ids: generation_config.json's (or config.json's) EOS ids, in the vocabulary;
  // masked while a request is below its min_tokens.
  Sampler(int64_t vocab_size, std::vector<int32_t> eos_token_ids);

  int64_t vocab_size() const { return vocab_size_; }

  // The rows lowered, valid until the next call (and while `rows`' spans live).
  std::span<const backend::SamplingRow> lower(std::span<const SampleRow> rows);

 private:
  int64_t vocab_size_;
  std::vector<int32_t> eos_token_ids_;
  std::vector<LoweredRow> storage_;  // grows to the most rows of one step, then reused
  std::vector<backend::SamplingRow> lowered_;
};

}  // namespace s4kv::engine
