// The steps between the model's logits and the distribution a token is drawn from, each a
// plain function over one row so tests can check it on hand-made logits. The sampler runs
// them in vLLM's order: logit_bias -> min_tokens mask -> repetition / frequency / presence
// penalties -> (greedy: argmax) -> temperature -> top_k -> top_p -> min_p. Rows are
// [vocab_size] fp32 host; a masked token is -inf. Token ids reaching these functions were
// validated (SamplingParams::validate) or produced by the engine, so a bad id is a bug.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/sampling_params.h"

namespace s4kv::engine {

// Adds params.logit_bias (each clamped to +-kMaxLogitBias) to the row.
void apply_logit_bias(std::span<float> logits, const SamplingParams& params);

// While fewer than min_tokens tokens were generated, masks the EOS ids and stop_token_ids so
// that neither can end the sequence early (as vLLM, also when ignore_eos is set).
void apply_min_tokens(std::span<float> logits, const SamplingParams& params,
                      int64_t num_output_tokens, std::span<const int32_t> eos_token_ids);

// Reusable per-sampler memory for the penalties: one stamp and one count per vocabulary entry,
// so a step costs O(prompt + output) and allocates nothing.
class PenaltyScratch {
 public:
  explicit PenaltyScratch(int64_t vocab_size) : stamp_(vocab_size, 0), count_(vocab_size, 0) {}
  // Starts a new set; returns its stamp.
  uint32_t next_epoch();
  std::vector<uint32_t>& stamp() { return stamp_; }
  std::vector<int32_t>& count() { return count_; }

 private:
  uint32_t epoch_ = 0;
  std::vector<uint32_t> stamp_;  // [vocab_size] epoch in which the token was last seen
  std::vector<int32_t> count_;   // [vocab_size] occurrences, valid where stamp == epoch
};

// vLLM's definitions: repetition_penalty over every token of prompt and output (positive
// logits divided by it, the others multiplied), then frequency_penalty * count and
// presence_penalty * (count > 0) subtracted for tokens of the output only (OpenAI's).
void apply_penalties(std::span<float> logits, std::span<const int32_t> prompt_token_ids,
                     std::span<const int32_t> output_token_ids, const SamplingParams& params,
                     PenaltyScratch& scratch);

// Index of the largest logit; the lowest index among equals (deterministic greedy).
int32_t argmax(std::span<const float> logits);

// The distribution a non-greedy token is drawn from: softmax(logits / temperature) restricted
// by top_k (ties with the k-th logit kept, as vLLM and transformers), then top_p (smallest
// set of most likely tokens whose mass reaches top_p), then min_p (tokens at least min_p
// times the most likely one), renormalized. Reused across rows; holds only the candidates.
class SamplingDistribution {
 public:
  struct Candidate {
    int32_t token_id;
    float logit;
    double prob;  // unnormalized until build() returns, then sums to 1
  };

  void build(std::span<const float> logits, const SamplingParams& params);
  // The token whose cumulative-probability interval holds u in [0, 1).
  int32_t sample(double u) const;
  // Tokens that can still be drawn, with their probabilities (order unspecified).
  std::span<const Candidate> candidates() const { return cands_; }

 private:
  void keep_top_k(int64_t k);
  void apply_top_p(double top_p);
  void apply_min_p(double min_p);

  std::vector<Candidate> cands_;
};

}  // namespace s4kv::engine
