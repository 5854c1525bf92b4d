// Sampling, the reference every backend's sampler is held to: one step's logits rows into one
// token each, with the logprobs a row asked for. Rows arrive lowered (SamplingRow: plain numbers
// and spans, no engine types), so backend/ needs no engine header; the engine lowers each
// request's SamplingParams (engine/sampler.h). The steps run in vLLM's order, each a plain
// function over one row: logit_bias -> min_tokens mask -> repetition / frequency / presence
// penalties -> (greedy: argmax, the lowest id among equals) -> temperature -> top_k -> top_p ->
// min_p -> one draw. A row's draw depends only on its stream key and its output length
// (uniform01), so seeded requests are reproducible whatever the batch holds and on any backend.
//
// Logprobs: vLLM v1's default ("raw_logprobs"): log_softmax of the model's raw logits, before
// logit_bias, penalties, temperature and top_k/top_p/min_p.
//
// A non-greedy row's draw walks the candidates in token id order (the same order on every
// backend, whatever top_k / top_p selection did to the order): the token whose interval of the
// cumulative normalized probability holds u.
//
// Rows are [vocab_size] fp32; a masked token is -inf. Token ids reaching these functions were
// validated (SamplingParams::validate) or produced by the engine, so a bad id is a bug.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace s4kv::backend {

// The most top logprobs a row may ask for (OpenAI's top_logprobs maximum).
inline constexpr int64_t kMaxTopLogprobs = 20;

// SplitMix64's finalizer: a bijective 64-bit mix with full avalanche.
constexpr uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

// Uniform double in [0, 1) for draw `counter` of the stream `key` (53 random bits): counter-based,
// nothing advances per step.
constexpr double uniform01(uint64_t key, uint64_t counter) {
  const uint64_t bits = mix64(key ^ mix64(counter + 0x2545f4914f6cdd1dull));
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

// One row's sampling settings, lowered from its request.
struct SamplingRow {
  bool greedy = true;
  double temperature = 1.0;
  int64_t top_k = 0;  // <= 0: off
  double top_p = 1.0;
  double min_p = 0.0;
  double repetition_penalty = 1.0;
  double presence_penalty = 0.0;
  double frequency_penalty = 0.0;
  std::span<const std::pair<int32_t, float>> logit_bias;  // token id, bias (already clamped)
  int64_t min_tokens = 0;
  // Masked while fewer than min_tokens tokens were generated: the request's stop_token_ids and
  // the model's EOS ids (so that neither can end the sequence early; as vLLM, also when
  // ignore_eos is set).
  std::span<const int32_t> min_tokens_masked_ids;
  int64_t num_logprobs = -1;  // top logprobs to return (<= kMaxTopLogprobs); < 0: no logprobs
  std::span<const int32_t> prompt_token_ids;  // for repetition_penalty
  std::span<const int32_t> output_token_ids;  // generated so far, before this step
  // Async scheduling: tokens sampled for this sequence by steps still in flight, not yet in
  // output_token_ids. They count in the output length (the draw's counter, min_tokens) but
  // their ids are unknown, so a row with penalties (which read the ids) never has any.
  int64_t num_output_placeholders = 0;
  uint64_t rng_key = 0;  // the sequence's stream

  // Outputs before this step's token: the draw's counter and what min_tokens compares.
  int64_t num_output_tokens() const {
    return static_cast<int64_t>(output_token_ids.size()) + num_output_placeholders;
  }
  bool has_penalties() const {
    return repetition_penalty != 1.0 || presence_penalty != 0.0 || frequency_penalty != 0.0;
  }
};

struct TokenLogprob {
  int32_t token_id = 0;
  float logprob = 0.0f;
};

struct SampleOutput {
  int32_t token_id = 0;
  // With num_logprobs >= 0: the sampled token's raw logprob and its rank (1 + the number of
  // tokens with a strictly larger raw logit), and the num_logprobs most likely tokens, logprob
  // descending (lower id first among equals).
  float logprob = 0.0f;
  int64_t rank = 0;
  std::vector<TokenLogprob> top_logprobs;
};

// Adds row.logit_bias to the logits.
void apply_logit_bias(std::span<float> logits, const SamplingRow& row);

// S4KV_CHECKs a row's settings and ids against a vocabulary (an engine bug when they fail):
// logit_bias and masked ids in the vocabulary, temperature > 0 unless greedy, top_p in (0, 1],
// min_p in [0, 1], penalties finite, repetition_penalty > 0, num_logprobs <= kMaxTopLogprobs,
// no output placeholders with penalties.
// The prompt and output ids are checked where a penalty reads them (PenaltyScratch::collect).
void check_sampling_row(const SamplingRow& row, int64_t vocab_size);

// While fewer than min_tokens tokens were generated, masks row.min_tokens_masked_ids.
void apply_min_tokens(std::span<float> logits, const SamplingRow& row);

// The distinct token ids a row's penalties touch: every id of prompt and output once when
// repetition_penalty applies, and every output id once with its count when frequency or
// presence penalty does (empty lists otherwise).
struct PenaltyIds {
  std::vector<int32_t> repeated;
  std::vector<std::pair<int32_t, int32_t>> counted;  // token id, occurrences in the output
};

// Reusable per-sampler memory for the penalties: one stamp and one count per vocabulary entry,
// so a row costs O(prompt + output) and, once warm, allocates nothing. Every sampler (the
// reference, the CUDA sampler's host side) collects a row's ids here.
class PenaltyScratch {
 public:
  explicit PenaltyScratch(int64_t vocab_size) : stamp_(vocab_size, 0), count_(vocab_size, 0) {}
  size_t vocab_size() const { return stamp_.size(); }
  // The row's distinct ids (S4KV_CHECK: in the vocabulary); valid until the next call.
  const PenaltyIds& collect(const SamplingRow& row);

 private:
  uint32_t next_epoch();

  uint32_t epoch_ = 0;
  std::vector<uint32_t> stamp_;  // [vocab_size] epoch in which the token was last seen
  std::vector<int32_t> count_;   // [vocab_size] occurrences, valid where stamp == epoch
  PenaltyIds ids_;
};

// vLLM's definitions: repetition_penalty over every token of prompt and output (positive
// logits divided by it, the others multiplied), then frequency_penalty * count and
// presence_penalty * (count > 0) subtracted for tokens of the output only (OpenAI's).
void apply_penalties(std::span<float> logits, const SamplingRow& row, PenaltyScratch& scratch);

// Index of the largest logit; the lowest index among equals (deterministic greedy).
int32_t argmax(std::span<const float> logits);

// The distribution a non-greedy token is drawn from: softmax(logits / temperature) restricted
// by top_k (ties with the k-th logit kept, as vLLM and transformers), then top_p (smallest
// set of most likely tokens whose mass reaches top_p), then min_p (tokens at least min_p
// times the most likely one), renormalized, in token id order. Reused across rows; holds only
// the candidates.
class SamplingDistribution {
 public:
  struct Candidate {
    int32_t token_id;
    float logit;
    double prob;  // unnormalized until build() returns, then sums to 1
  };

  void build(std::span<const float> logits, const SamplingRow& row);
  // The token whose cumulative-probability interval holds u in [0, 1).
  int32_t sample(double u) const;
  // Tokens that can still be drawn, with their probabilities, in token id order.
  std::span<const Candidate> candidates() const { return cands_; }

 private:
  void keep_top_k(int64_t k);
  void apply_top_p(double top_p);
  void apply_min_p(double min_p);

  std::vector<Candidate> cands_;
};

// The reference sampler (host, one row at a time). Owns its scratch (nothing is allocated per
// step once warm). One thread at a time.
class ReferenceSampler {
 public:
  explicit ReferenceSampler(int64_t vocab_size);

  int64_t vocab_size() const { return vocab_size_; }

  // logits: [rows.size(), vocab_size] fp32 host, row-major. Resizes `out` to rows.size(),
  // reusing its vectors.
  void sample(std::span<const float> logits, std::span<const SamplingRow> rows,
              std::vector<SampleOutput>& out);
  // One row: logits is [vocab_size].
  void sample_row(std::span<const float> logits, const SamplingRow& row, SampleOutput& out);

 private:
  void fill_logprobs(std::span<const float> raw, int64_t num_top, SampleOutput& out);

  int64_t vocab_size_;
  std::vector<float> logits_;  // [vocab_size] the row being processed
  PenaltyScratch penalties_;
  SamplingDistribution dist_;
};

}  // namespace s4kv::backend
