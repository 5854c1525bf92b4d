#include "engine/logits_processors.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace s4kv::engine {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

void check_id(int64_t id, size_t vocab_size) {
  S4KV_CHECK(id >= 0 && static_cast<size_t>(id) < vocab_size, "token id ", id,
             " outside the vocabulary of ", vocab_size);
}

// Higher logit first; the lower id among equals, so every ordering here is deterministic.
bool by_logit_desc(const SamplingDistribution::Candidate& a,
                   const SamplingDistribution::Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.token_id < b.token_id);
}

bool by_prob_desc(const SamplingDistribution::Candidate& a,
                  const SamplingDistribution::Candidate& b) {
  return a.prob > b.prob || (a.prob == b.prob && a.token_id < b.token_id);
}

}  // namespace

void apply_logit_bias(std::span<float> logits, const SamplingParams& params) {
  for (const auto& [id, bias] : params.logit_bias) {
    check_id(id, logits.size());
    logits[id] += static_cast<float>(std::clamp(bias, -kMaxLogitBias, kMaxLogitBias));
  }
}

void apply_min_tokens(std::span<float> logits, const SamplingParams& params,
                      int64_t num_output_tokens, std::span<const int32_t> eos_token_ids) {
  if (num_output_tokens >= params.min_tokens) return;
  for (int32_t id : eos_token_ids) {
    check_id(id, logits.size());
    logits[id] = kNegInf;
  }
  for (int64_t id : params.stop_token_ids) {
    check_id(id, logits.size());
    logits[id] = kNegInf;
  }
}

uint32_t PenaltyScratch::next_epoch() {
  if (++epoch_ == 0) {  // wrapped: old stamps could alias the new epoch
    std::fill(stamp_.begin(), stamp_.end(), 0);
    epoch_ = 1;
  }
  return epoch_;
}

namespace {

void apply_repetition_penalty(std::span<float> logits, std::span<const int32_t> tokens,
                              float penalty, uint32_t epoch, std::vector<uint32_t>& stamp) {
  for (int32_t t : tokens) {
    check_id(t, logits.size());
    if (stamp[t] == epoch) continue;  // each token once, however often it occurs
    stamp[t] = epoch;
    logits[t] = logits[t] > 0.0f ? logits[t] / penalty : logits[t] * penalty;
  }
}

}  // namespace

void apply_penalties(std::span<float> logits, std::span<const int32_t> prompt_token_ids,
                     std::span<const int32_t> output_token_ids, const SamplingParams& params,
                     PenaltyScratch& scratch) {
  S4KV_CHECK(logits.size() == scratch.stamp().size(), "penalty scratch for another vocabulary");
  auto& stamp = scratch.stamp();
  if (params.repetition_penalty != 1.0) {
    const uint32_t epoch = scratch.next_epoch();
    const auto penalty = static_cast<float>(params.repetition_penalty);
    apply_repetition_penalty(logits, prompt_token_ids, penalty, epoch, stamp);
    apply_repetition_penalty(logits, output_token_ids, penalty, epoch, stamp);
  }
  if (params.frequency_penalty == 0.0 && params.presence_penalty == 0.0) return;
  auto& count = scratch.count();
  const uint32_t epoch = scratch.next_epoch();
  for (int32_t t : output_token_ids) {
    check_id(t, logits.size());
    if (stamp[t] != epoch) {
      stamp[t] = epoch;
      count[t] = 0;
    }
    ++count[t];
  }
  const auto freq = static_cast<float>(params.frequency_penalty);
  const auto presence = static_cast<float>(params.presence_penalty);
  for (int32_t t : output_token_ids) {
    if (count[t] == 0) continue;  // already applied
    logits[t] -= freq * static_cast<float>(count[t]) + presence;
    count[t] = 0;
  }
}

int32_t argmax(std::span<const float> logits) {
  S4KV_CHECK(!logits.empty(), "argmax of an empty row");
  size_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

void SamplingDistribution::build(std::span<const float> logits, const SamplingParams& params) {
  cands_.clear();
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] > kNegInf) cands_.push_back({static_cast<int32_t>(i), logits[i], 0.0});
  }
  // Everything masked (only possible when a request masks the whole vocabulary): fall back to
  // the plain argmax rather than fail.
  if (cands_.empty()) {
    const int32_t t = argmax(logits);
    cands_.push_back({t, 0.0f, 1.0});
    return;
  }
  if (params.top_k_enabled()) keep_top_k(params.top_k);
  float max_logit = kNegInf;
  for (const Candidate& c : cands_) max_logit = std::max(max_logit, c.logit);
  // softmax(logit / T) up to a constant: the most likely token gets exactly 1.
  const double inv_t = 1.0 / params.temperature;
  for (Candidate& c : cands_) c.prob = std::exp((double{c.logit} - max_logit) * inv_t);
  if (params.top_p < 1.0) apply_top_p(params.top_p);
  if (params.min_p > 0.0) apply_min_p(params.min_p);
  double total = 0.0;
  for (const Candidate& c : cands_) total += c.prob;
  for (Candidate& c : cands_) c.prob /= total;
}

void SamplingDistribution::keep_top_k(int64_t k) {
  if (k >= static_cast<int64_t>(cands_.size())) return;
  // O(V) selection; the full vocabulary is never sorted for top_k.
  std::nth_element(cands_.begin(), cands_.begin() + (k - 1), cands_.end(), by_logit_desc);
  const float kth = cands_[k - 1].logit;
  auto end = std::partition(cands_.begin() + k, cands_.end(),
                            [kth](const Candidate& c) { return c.logit == kth; });
  cands_.erase(end, cands_.end());
}

void SamplingDistribution::apply_top_p(double top_p) {
  std::sort(cands_.begin(), cands_.end(), by_prob_desc);
  double total = 0.0;
  for (const Candidate& c : cands_) total += c.prob;
  const double target = top_p * total;
  double cum = 0.0;
  size_t keep = 0;
  while (keep < cands_.size() && cum < target) cum += cands_[keep++].prob;
  cands_.resize(std::max<size_t>(keep, 1));
}

void SamplingDistribution::apply_min_p(double min_p) {
  double max_prob = 0.0;
  for (const Candidate& c : cands_) max_prob = std::max(max_prob, c.prob);
  const double threshold = min_p * max_prob;
  std::erase_if(cands_, [threshold](const Candidate& c) { return c.prob < threshold; });
}

int32_t SamplingDistribution::sample(double u) const {
  S4KV_CHECK(!cands_.empty(), "sample before build");
  double cum = 0.0;
  for (const Candidate& c : cands_) {
    cum += c.prob;
    if (u < cum) return c.token_id;
  }
  // Rounding left u just above the total: the last candidate owns the gap.
  return cands_.back().token_id;
}

}  // namespace s4kv::engine
