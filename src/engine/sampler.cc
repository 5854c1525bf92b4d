#include "engine/sampler.h"

#include <algorithm>
#include <cmath>

#include "engine/sampler_rng.h"

namespace s4kv::engine {
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

Sampler::Sampler(int64_t vocab_size, std::vector<int32_t> eos_token_ids)
    : vocab_size_(vocab_size),
      eos_token_ids_(std::move(eos_token_ids)),
      logits_(vocab_size),
      penalties_(vocab_size) {
  S4KV_CHECK(vocab_size > 0, "sampler: vocab_size ", vocab_size);
  for (int32_t id : eos_token_ids_) {
    S4KV_CHECK(id >= 0 && id < vocab_size, "sampler: EOS id ", id, " outside the vocabulary");
  }
}

void Sampler::sample(std::span<const float> logits, std::span<const SampleRow> rows,
                     std::vector<SampleOutput>& out) {
  const auto v = static_cast<size_t>(vocab_size_);
  S4KV_CHECK(logits.size() == rows.size() * v, "sampler: ", logits.size(), " logits for ",
             rows.size(), " rows of ", v);
  out.resize(rows.size());
  for (size_t r = 0; r < rows.size(); ++r) sample_row(logits.subspan(r * v, v), rows[r], out[r]);
}

void Sampler::sample_row(std::span<const float> raw, const SampleRow& row, SampleOutput& out) {
  S4KV_CHECK(row.params != nullptr && static_cast<int64_t>(raw.size()) == vocab_size_,
             "sampler: bad row");
  const SamplingParams& p = *row.params;
  const auto num_output = static_cast<int64_t>(row.output_token_ids.size());
  std::copy(raw.begin(), raw.end(), logits_.begin());
  apply_logit_bias(logits_, p);
  apply_min_tokens(logits_, p, num_output, eos_token_ids_);
  apply_penalties(logits_, row.prompt_token_ids, row.output_token_ids, p, penalties_);
  if (p.greedy()) {
    out.token_id = argmax(logits_);
  } else {
    dist_.build(logits_, p);
    out.token_id = dist_.sample(uniform01(row.rng_key, static_cast<uint64_t>(num_output)));
  }
  if (p.logprobs) {
    fill_logprobs(raw, *p.logprobs, out);
  } else {
    out.logprob = 0.0f;
    out.rank = 0;
    out.top_logprobs.clear();
  }
}

void Sampler::fill_logprobs(std::span<const float> raw, int64_t num_top, SampleOutput& out) {
  const double lse = log_sum_exp(raw);
  const float chosen = raw[out.token_id];
  out.logprob = static_cast<float>(chosen - lse);
  out.rank = 1 + std::count_if(raw.begin(), raw.end(), [chosen](float x) { return x > chosen; });
  top_n(raw, num_top, out.top_logprobs);
  for (TokenLogprob& t : out.top_logprobs) t.logprob = static_cast<float>(t.logprob - lse);
}

}  // namespace s4kv::engine
