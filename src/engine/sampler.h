// Sampler: turns one step's logits into one token per sequence, with the logprobs a request
// asked for. Each row is processed on its own (logits_processors.h gives the steps and
// their order); a row's random draw depends only on its sequence key and its output length
// (sampler_rng.h), so seeded requests are reproducible whatever the batch holds.
//
// Logprobs semantics: vLLM v1's default ("raw_logprobs"): log_softmax of the model's raw
// logits, before logit_bias, penalties, temperature and top_k/top_p/min_p. So a sampled
// token's logprob does not depend on the sampling settings, and greedy and sampled requests
// report the same numbers for the same logits.
//
// Engine thread only; owns its scratch buffers (nothing is allocated per step once warm).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/logits_processors.h"
#include "engine/sampling_params.h"

namespace s4kv::engine {

struct TokenLogprob {
  int32_t token_id = 0;
  float logprob = 0.0f;
};

// What one sequence needs sampled this step. Spans are read during sample() only.
struct SampleRow {
  const SamplingParams* params = nullptr;
  std::span<const int32_t> prompt_token_ids;  // for repetition_penalty
  std::span<const int32_t> output_token_ids;  // generated so far, before this step
  uint64_t rng_key = 0;                       // the sequence's stream (SequenceKeySource)
};

struct SampleOutput {
  int32_t token_id = 0;
  // Set when params.logprobs is: the sampled token's raw logprob and its rank (1 + the
  // number of tokens with a strictly larger raw logit), and the params.logprobs most likely
  // tokens, logprob descending (lower id first among equals).
  float logprob = 0.0f;
  int64_t rank = 0;
  std::vector<TokenLogprob> top_logprobs;
};

class Sampler {
 public:
  // eos_token_ids: generation_config.json's (or config.json's) EOS ids, in the vocabulary;
  // masked while a request is below its min_tokens.
  Sampler(int64_t vocab_size, std::vector<int32_t> eos_token_ids);

  int64_t vocab_size() const { return vocab_size_; }

  // logits: [rows.size(), vocab_size] fp32 host, row-major (Backend::forward's output).
  // Resizes `out` to rows.size(); reuses its vectors.
  void sample(std::span<const float> logits, std::span<const SampleRow> rows,
              std::vector<SampleOutput>& out);

  // One row: logits is [vocab_size].
  void sample_row(std::span<const float> logits, const SampleRow& row, SampleOutput& out);

 private:
  void fill_logprobs(std::span<const float> raw, int64_t num_top, SampleOutput& out);

  int64_t vocab_size_;
  std::vector<int32_t> eos_token_ids_;
  std::vector<float> logits_;  // [vocab_size] the row being processed
  PenaltyScratch penalties_;
  SamplingDistribution dist_;
};

}  // namespace s4kv::engine
