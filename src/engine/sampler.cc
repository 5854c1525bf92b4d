#include "engine/sampler.h"

#include <algorithm>

#include "common/check.h"

namespace s4kv::engine {

backend::SamplingRow lower(const SampleRow& row, LoweredRow& storage) {
  S4KV_CHECK(row.params != nullptr, "sampler: a row without parameters");
  const SamplingParams& p = *row.params;
  storage.logit_bias.clear();
  for (const auto& [id, bias] : p.logit_bias) {
    storage.logit_bias.emplace_back(
        static_cast<int32_t>(id),
        static_cast<float>(std::clamp(bias, -kMaxLogitBias, kMaxLogitBias)));
  }
  storage.stop_token_ids.assign(p.stop_token_ids.begin(), p.stop_token_ids.end());
  backend::SamplingRow r;
  r.greedy = p.greedy();
  r.temperature = p.temperature;
  r.top_k = p.top_k_enabled() ? p.top_k : 0;
  r.top_p = p.top_p;
  r.min_p = p.min_p;
  r.repetition_penalty = p.repetition_penalty;
  r.presence_penalty = p.presence_penalty;
  r.frequency_penalty = p.frequency_penalty;
  r.logit_bias = storage.logit_bias;
  r.min_tokens = p.min_tokens;
  r.stop_token_ids = storage.stop_token_ids;
  r.num_logprobs = p.logprobs ? *p.logprobs : -1;
  r.prompt_token_ids = row.prompt_token_ids;
  r.output_token_ids = row.output_token_ids;
  r.rng_key = row.rng_key;
  return r;
}

Sampler::Sampler(int64_t vocab_size, std::vector<int32_t> eos_token_ids)
    : reference_(vocab_size, std::move(eos_token_ids)) {}

void Sampler::sample(std::span<const float> logits, std::span<const SampleRow> rows,
                     std::vector<SampleOutput>& out) {
  const auto v = static_cast<size_t>(vocab_size());
  S4KV_CHECK(logits.size() == rows.size() * v, "sampler: ", logits.size(), " logits for ",
             rows.size(), " rows of ", v);
  out.resize(rows.size());
  for (size_t r = 0; r < rows.size(); ++r) sample_row(logits.subspan(r * v, v), rows[r], out[r]);
}

void Sampler::sample_row(std::span<const float> logits, const SampleRow& row, SampleOutput& out) {
  reference_.sample_row(logits, lower(row, storage_), out);
}

}  // namespace s4kv::engine
