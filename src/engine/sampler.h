// The engine's side of sampling: each row's request settings (SamplingParams) lowered into the
// backend's SamplingRow (backend/sampling.h, which holds the steps, their order, the logprobs
// semantics and the counter-based draws), then sampled by the reference sampler. Engine thread
// only; owns its scratch (nothing is allocated per step once warm).
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

// What one sequence needs sampled this step. Spans are read during sample() only.
struct SampleRow {
  const SamplingParams* params = nullptr;
  std::span<const int32_t> prompt_token_ids;  // for repetition_penalty
  std::span<const int32_t> output_token_ids;  // generated so far, before this step
  uint64_t rng_key = 0;                       // the sequence's stream (SequenceKeySource)
};

// The lowered row, its logit_bias clamped to +-kMaxLogitBias and its stop token ids narrowed.
// The row's spans point into `storage` (and into row's spans): valid while both live unchanged.
struct LoweredRow {
  std::vector<std::pair<int32_t, float>> logit_bias;
  std::vector<int32_t> stop_token_ids;
};
backend::SamplingRow lower(const SampleRow& row, LoweredRow& storage);

class Sampler {
 public:
  // eos_token_ids: generation_config.json's (or config.json's) EOS ids, in the vocabulary;
  // masked while a request is below its min_tokens.
  Sampler(int64_t vocab_size, std::vector<int32_t> eos_token_ids);

  int64_t vocab_size() const { return reference_.vocab_size(); }

  // logits: [rows.size(), vocab_size] fp32 host, row-major (Backend::wait's output).
  // Resizes `out` to rows.size(); reuses its vectors.
  void sample(std::span<const float> logits, std::span<const SampleRow> rows,
              std::vector<SampleOutput>& out);

  // One row: logits is [vocab_size].
  void sample_row(std::span<const float> logits, const SampleRow& row, SampleOutput& out);

 private:
  backend::ReferenceSampler reference_;
  LoweredRow storage_;
};

}  // namespace s4kv::engine
