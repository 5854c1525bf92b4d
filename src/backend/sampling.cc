#include "backend/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/check.h"

namespace s4kv::backend {
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

void apply_logit_bias(std::span<float> logits, const SamplingRow& row) {
  for (const auto& [id, bias] : row.logit_bias) {
    check_id(id, logits.size());
    logits[id] += bias;
  }
}

void check_sampling_row(const SamplingRow& row, int64_t vocab_size) {
  const auto v = static_cast<size_t>(vocab_size);
  for (const auto& [id, bias] : row.logit_bias) {
    check_id(id, v);
    S4KV_CHECK(std::isfinite(bias), "sampling: logit_bias ", bias);
  }
  for (int32_t id : row.min_tokens_masked_ids) check_id(id, v);
  S4KV_CHECK(row.greedy || (row.temperature > 0.0 && std::isfinite(row.temperature)),
             "sampling: temperature ", row.temperature);
  S4KV_CHECK(row.top_p > 0.0 && row.top_p <= 1.0, "sampling: top_p ", row.top_p);
  S4KV_CHECK(row.min_p >= 0.0 && row.min_p <= 1.0, "sampling: min_p ", row.min_p);
  S4KV_CHECK(row.repetition_penalty > 0.0 && std::isfinite(row.repetition_penalty) &&
                 std::isfinite(row.presence_penalty) && std::isfinite(row.frequency_penalty),
             "sampling: penalties ", row.repetition_penalty, " ", row.presence_penalty, " ",
             row.frequency_penalty);
  S4KV_CHECK(row.num_logprobs <= kMaxTopLogprobs, "sampling: ", row.num_logprobs, " logprobs");
  S4KV_CHECK(row.num_output_placeholders >= 0 &&
                 (row.num_output_placeholders == 0 || !row.has_penalties()),
             "sampling: ", row.num_output_placeholders, " output placeholders",
             row.has_penalties() ? " in a row with penalties" : "");
}

void apply_min_tokens(std::span<float> logits, const SamplingRow& row) {
  if (row.num_output_tokens() >= row.min_tokens) return;
  for (int32_t id : row.min_tokens_masked_ids) {
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

const PenaltyIds& PenaltyScratch::collect(const SamplingRow& row) {
  ids_.repeated.clear();
  ids_.counted.clear();
  if (row.repetition_penalty != 1.0) {  // each token once, however often it occurs
    const uint32_t epoch = next_epoch();
    for (const std::span<const int32_t> list : {row.prompt_token_ids, row.output_token_ids}) {
      for (int32_t t : list) {
        check_id(t, stamp_.size());
        if (stamp_[t] == epoch) continue;
        stamp_[t] = epoch;
        ids_.repeated.push_back(t);
      }
    }
  }
  if (row.frequency_penalty == 0.0 && row.presence_penalty == 0.0) return ids_;
  const uint32_t epoch = next_epoch();
  for (int32_t t : row.output_token_ids) {
    check_id(t, stamp_.size());
    if (stamp_[t] != epoch) {
      stamp_[t] = epoch;
      count_[t] = 0;
    }
    ++count_[t];
  }
  for (int32_t t : row.output_token_ids) {
    if (count_[t] == 0) continue;  // already listed
    ids_.counted.emplace_back(t, count_[t]);
    count_[t] = 0;
  }
  return ids_;
}

void apply_penalties(std::span<float> logits, const SamplingRow& row, PenaltyScratch& scratch) {
  S4KV_CHECK(logits.size() == scratch.vocab_size(), "penalty scratch for another vocabulary");
  const PenaltyIds& ids = scratch.collect(row);
  const auto penalty = static_cast<float>(row.repetition_penalty);
  for (int32_t t : ids.repeated) {
    logits[t] = logits[t] > 0.0f ? logits[t] / penalty : logits[t] * penalty;
  }
  const auto freq = static_cast<float>(row.frequency_penalty);
  const auto presence = static_cast<float>(row.presence_penalty);
  for (const auto& [t, n] : ids.counted) logits[t] -= freq * static_cast<float>(n) + presence;
}

int32_t argmax(std::span<const float> logits) {
  S4KV_CHECK(!logits.empty(), "argmax of an empty row");
  size_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

void SamplingDistribution::build(std::span<const float> logits, const SamplingRow& row) {
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
  if (row.top_k > 0) keep_top_k(row.top_k);
  float max_logit = kNegInf;
  for (const Candidate& c : cands_) max_logit = std::max(max_logit, c.logit);
  // softmax(logit / T) up to a constant: the most likely token gets exactly 1.
  const double inv_t = 1.0 / row.temperature;
  for (Candidate& c : cands_) c.prob = std::exp((double{c.logit} - max_logit) * inv_t);
  if (row.top_p < 1.0) apply_top_p(row.top_p);
  if (row.min_p > 0.0) apply_min_p(row.min_p);
  // The draw's order: token ids ascending, whatever the selections above did to the order.
  if (row.top_k > 0 || row.top_p < 1.0) {
    std::sort(cands_.begin(), cands_.end(),
              [](const Candidate& a, const Candidate& b) { return a.token_id < b.token_id; });
  }
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

namespace {

// log(sum(exp(x))) over the row, in double so 152k terms lose nothing.
double log_sum_exp(std::span<const float> x) {
  const float m = *std::max_element(x.begin(), x.end());
  double sum = 0.0;
  for (float v : x) sum += std::exp(double{v} - m);
  return m + std::log(sum);
}

bool better(const TokenLogprob& a, const TokenLogprob& b) {
  return a.logprob > b.logprob || (a.logprob == b.logprob && a.token_id < b.token_id);
}

// The n largest entries of x (as raw logits for now), best first: a size-n heap over one
// pass, never a sort of the vocabulary.
void top_n(std::span<const float> x, int64_t n, std::vector<TokenLogprob>& out) {
  out.clear();
  if (n <= 0) return;
  // `better` as the heap order keeps the worst kept entry at the front.
  for (size_t i = 0; i < x.size(); ++i) {
    const TokenLogprob c{static_cast<int32_t>(i), x[i]};
    if (static_cast<int64_t>(out.size()) < n) {
      out.push_back(c);
      std::push_heap(out.begin(), out.end(), better);
    } else if (better(c, out.front())) {
      std::pop_heap(out.begin(), out.end(), better);
      out.back() = c;
      std::push_heap(out.begin(), out.end(), better);
    }
  }
  std::sort_heap(out.begin(), out.end(), better);  // ascending under `better`: best first
}

}  // namespace

ReferenceSampler::ReferenceSampler(int64_t vocab_size)
    : vocab_size_(vocab_size), logits_(vocab_size), penalties_(vocab_size) {
  S4KV_CHECK(vocab_size > 0, "sampler: vocab_size ", vocab_size);
}

void ReferenceSampler::sample(std::span<const float> logits, std::span<const SamplingRow> rows,
                              std::vector<SampleOutput>& out) {
  const auto v = static_cast<size_t>(vocab_size_);
  S4KV_CHECK(logits.size() == rows.size() * v, "sampler: ", logits.size(), " logits for ",
             rows.size(), " rows of ", v);
  out.resize(rows.size());
  for (size_t r = 0; r < rows.size(); ++r) sample_row(logits.subspan(r * v, v), rows[r], out[r]);
}

void ReferenceSampler::sample_row(std::span<const float> raw, const SamplingRow& row,
                                  SampleOutput& out) {
  S4KV_CHECK(static_cast<int64_t>(raw.size()) == vocab_size_, "sampler: bad row");
  const int64_t num_output = row.num_output_tokens();
  std::copy(raw.begin(), raw.end(), logits_.begin());
  apply_logit_bias(logits_, row);
  apply_min_tokens(logits_, row);
  apply_penalties(logits_, row, penalties_);
  if (row.greedy) {
    out.token_id = argmax(logits_);
  } else {
    dist_.build(logits_, row);
    out.token_id = dist_.sample(uniform01(row.rng_key, static_cast<uint64_t>(num_output)));
  }
  if (row.num_logprobs >= 0) {
    fill_logprobs(raw, row.num_logprobs, out);
  } else {
    out.logprob = 0.0f;
    out.rank = 0;
    out.top_logprobs.clear();
  }
}

void ReferenceSampler::fill_logprobs(std::span<const float> raw, int64_t num_top,
                                     SampleOutput& out) {
  const double lse = log_sum_exp(raw);
  const float chosen = raw[out.token_id];
  out.logprob = static_cast<float>(chosen - lse);
  out.rank = 1 + std::count_if(raw.begin(), raw.end(), [chosen](float x) { return x > chosen; });
  top_n(raw, num_top, out.top_logprobs);
  for (TokenLogprob& t : out.top_logprobs) t.logprob = static_cast<float>(t.logprob - lse);
}

}  // namespace s4kv::backend
