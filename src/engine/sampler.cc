#include "engine/sampler.h"

#include <algorithm>

#include "common/check.h"

namespace s4kv::engine {

backend::SamplingRow lower(const SampleRow& row, std::span<const int32_t> eos_token_ids,
                           LoweredRow& storage) {
  S4KV_CHECK(row.params != nullptr, "sampler: a row without parameters");
  const SamplingParams& p = *row.params;
  storage.logit_bias.clear();
  for (const auto& [id, bias] : p.logit_bias) {
    storage.logit_bias.emplace_back(
        static_cast<int32_t>(id),
        static_cast<float>(std::clamp(bias, -kMaxLogitBias, kMaxLogitBias)));
  }
  storage.min_tokens_masked_ids.assign(p.stop_token_ids.begin(), p.stop_token_ids.end());
  storage.min_tokens_masked_ids.insert(storage.min_tokens_masked_ids.end(), eos_token_ids.begin(),
                                       eos_token_ids.end());
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
  r.min_tokens_masked_ids = storage.min_tokens_masked_ids;
  r.num_logprobs = p.logprobs ? *p.logprobs : -1;
  r.prompt_token_ids = row.prompt_token_ids;
  r.output_token_ids = row.output_token_ids;
  r.num_output_placeholders = row.num_output_placeholders;
  r.rng_key = row.rng_key;
  return r;
}

Sampler::Sampler(int64_t vocab_size, std::vector<int32_t> eos_token_ids)
    : vocab_size_(vocab_size), eos_token_ids_(std::move(eos_token_ids)) {
  S4KV_CHECK(vocab_size > 0, "sampler: vocab_size ", vocab_size);
  for (int32_t id : eos_token_ids_) {
    S4KV_CHECK(id >= 0 && id < vocab_size, "sampler: EOS id ", id, " outside the vocabulary");
  }
}

std::span<const backend::SamplingRow> Sampler::lower(std::span<const SampleRow> rows) {
  if (storage_.size() < rows.size()) storage_.resize(rows.size());
  lowered_.clear();
  for (size_t i = 0; i < rows.size(); ++i) {
    lowered_.push_back(engine::lower(rows[i], eos_token_ids_, storage_[i]));
  }
  return lowered_;
}

}  // namespace s4kv::engine
