// Sampler: greedy, distribution sanity, seed reproducibility across batch compositions,
// raw logprobs, min_tokens through the whole row pipeline.
#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <utility>
#include <vector>

#include "engine/sampler_rng.h"

namespace s4kv::engine {
namespace {

// The engine's lowering, then the reference sampler: what a backend whose logits are in host
// memory runs for each step (backend.h, HostSamplingBackend).
struct LoweredSampler {
  LoweredSampler(int64_t vocab_size, std::vector<int32_t> eos_token_ids)
      : lowering(vocab_size, std::move(eos_token_ids)), reference(vocab_size) {}
  int64_t vocab_size() const { return reference.vocab_size(); }
  void sample(std::span<const float> logits, std::span<const SampleRow> rows,
              std::vector<SampleOutput>& out) {
    reference.sample(logits, lowering.lower(rows), out);
  }
  void sample_row(std::span<const float> logits, const SampleRow& row, SampleOutput& out) {
    reference.sample_row(logits, lowering.lower({&row, 1})[0], out);
  }

  Sampler lowering;
  backend::ReferenceSampler reference;
};

SampleOutput sample_one(LoweredSampler& s, const std::vector<float>& logits,
                        const SamplingParams& p, const std::vector<int32_t>& output = {},
                        uint64_t key = 1) {
  SampleRow row{&p, {}, output, key};
  SampleOutput out;
  s.sample_row(logits, row, out);
  return out;
}

// The lowering into the backend's row: every field carried, logit_bias clamped to
// +-kMaxLogitBias, top_k -1 and unset logprobs turned into the row's "off" values.
TEST(SamplerLowering, CarriesEveryFieldAndClampsTheBias) {
  SamplingParams p;
  p.temperature = 0.7;
  p.top_k = -1;
  p.top_p = 0.9;
  p.min_p = 0.05;
  p.repetition_penalty = 1.1;
  p.presence_penalty = 0.2;
  p.frequency_penalty = 0.3;
  p.logit_bias = {{4, 250.0}, {7, -1.5}};
  p.min_tokens = 3;
  p.stop_token_ids = {9, 11};
  const std::vector<int32_t> prompt = {1, 2}, output = {3};
  LoweredRow storage;
  const std::vector<int32_t> eos = {2};
  backend::SamplingRow r = lower(SampleRow{&p, prompt, output, 42}, eos, storage);
  EXPECT_FALSE(r.greedy);
  EXPECT_EQ(r.temperature, 0.7);
  EXPECT_EQ(r.top_k, 0);
  EXPECT_EQ(r.top_p, 0.9);
  EXPECT_EQ(r.min_p, 0.05);
  EXPECT_EQ(r.repetition_penalty, 1.1);
  EXPECT_EQ(r.presence_penalty, 0.2);
  EXPECT_EQ(r.frequency_penalty, 0.3);
  ASSERT_EQ(r.logit_bias.size(), 2u);
  EXPECT_EQ(r.logit_bias[0], (std::pair<int32_t, float>{4, 100.0f}));
  EXPECT_EQ(r.logit_bias[1], (std::pair<int32_t, float>{7, -1.5f}));
  EXPECT_EQ(r.min_tokens, 3);
  EXPECT_EQ(std::vector<int32_t>(r.min_tokens_masked_ids.begin(), r.min_tokens_masked_ids.end()),
            (std::vector<int32_t>{9, 11, 2}))
      << "stop_token_ids, then the EOS ids";
  EXPECT_EQ(r.num_logprobs, -1);
  EXPECT_EQ(r.prompt_token_ids.data(), prompt.data());
  EXPECT_EQ(r.output_token_ids.data(), output.data());
  EXPECT_EQ(r.rng_key, 42u);
  p.temperature = 0.0;
  p.top_k = 5;
  p.logprobs = 0;
  r = lower(SampleRow{&p, prompt, output, 42}, eos, storage);
  EXPECT_TRUE(r.greedy);
  EXPECT_EQ(r.top_k, 5);
  EXPECT_EQ(r.num_logprobs, 0) << "logprobs=0: the sampled token's logprob, no top list";
}

// Deterministic pseudo-logits for a step: a fake model whose output depends on the history.
std::vector<float> fake_logits(int64_t vocab, const std::vector<int32_t>& history) {
  uint64_t h = 12345;
  for (int32_t t : history) h = mix64(h ^ static_cast<uint64_t>(t));
  std::vector<float> l(vocab);
  for (int64_t i = 0; i < vocab; ++i) {
    l[i] = static_cast<float>(uniform01(h, static_cast<uint64_t>(i)) * 4.0);
  }
  return l;
}

TEST(Sampler, GreedyIsArgmaxWithLowestIndexTieBreak) {
  LoweredSampler s(5, {});
  SamplingParams p;
  p.temperature = 0.0;
  EXPECT_EQ(sample_one(s, {0.1f, 2.0f, 2.0f, -1.0f, 1.9f}, p).token_id, 1);
  p.logit_bias = {{4, 0.5}};
  EXPECT_EQ(sample_one(s, {0.1f, 2.0f, 2.0f, -1.0f, 1.9f}, p).token_id, 4);
}

TEST(Sampler, TemperatureDrawsFollowTheDistribution) {
  // 20000 draws from independent streams; chi-square with 3 degrees of freedom must stay
  // under 16.27 (p = 0.001). Fixed keys: the outcome is deterministic, not flaky.
  const std::vector<double> probs = {0.1, 0.2, 0.3, 0.4};
  std::vector<float> logits;
  for (double q : probs) logits.push_back(static_cast<float>(std::log(q)));
  for (double temperature : {1.0, 0.5}) {
    std::vector<double> expected = probs;
    double z = 0.0;
    for (double& e : expected) z += (e = std::pow(e, 1.0 / temperature));
    LoweredSampler s(4, {});
    SamplingParams p;
    p.temperature = temperature;
    constexpr int kDraws = 20000;
    std::vector<int> counts(4, 0);
    for (int i = 0; i < kDraws; ++i) {
      ++counts[sample_one(s, logits, p, {}, seeded_sequence_key(7, i)).token_id];
    }
    double chi2 = 0.0;
    for (int t = 0; t < 4; ++t) {
      const double e = kDraws * expected[t] / z;
      chi2 += (counts[t] - e) * (counts[t] - e) / e;
    }
    EXPECT_LT(chi2, 16.27) << "temperature " << temperature;
  }
}

// Generates `steps` tokens for every request of a batch, the way the engine loop would.
std::vector<std::vector<int32_t>> generate(LoweredSampler& s,
                                           const std::vector<SamplingParams>& params,
                                           const std::vector<uint64_t>& keys, int steps) {
  const int64_t vocab = s.vocab_size();
  std::vector<std::vector<int32_t>> outputs(params.size());
  const std::vector<int32_t> prompt = {1, 2, 3};
  std::vector<SampleOutput> results;
  for (int step = 0; step < steps; ++step) {
    std::vector<float> logits;
    std::vector<SampleRow> rows;
    for (size_t r = 0; r < params.size(); ++r) {
      const std::vector<float> l = fake_logits(vocab, outputs[r]);
      logits.insert(logits.end(), l.begin(), l.end());
      rows.push_back({&params[r], prompt, outputs[r], keys[r]});
    }
    s.sample(logits, rows, results);
    for (size_t r = 0; r < params.size(); ++r) outputs[r].push_back(results[r].token_id);
  }
  return outputs;
}

TEST(Sampler, SameSeedSameTokensWhateverTheBatch) {
  constexpr int64_t kVocab = 64;
  LoweredSampler s(kVocab, {});
  SequenceKeySource keys(99);
  SamplingParams seeded;
  seeded.seed = 1234;
  seeded.top_k = 20;
  seeded.repetition_penalty = 1.1;
  SamplingParams other;
  other.temperature = 1.5;
  other.top_p = 0.9;

  const auto alone = generate(s, {seeded}, {keys.key(seeded.seed, 0)}, 30);
  const auto last = generate(
      s, {other, other, seeded},
      {keys.key(std::nullopt, 0), keys.key(std::nullopt, 0), keys.key(seeded.seed, 0)}, 30);
  const auto first =
      generate(s, {seeded, other}, {keys.key(seeded.seed, 0), keys.key(int64_t{5}, 0)}, 30);
  EXPECT_EQ(alone[0], last[2]);
  EXPECT_EQ(alone[0], first[0]);
  // Another seed, or another of the n sequences of the same seed, is another stream.
  const auto second_seq = generate(s, {seeded}, {keys.key(seeded.seed, 1)}, 30);
  SamplingParams reseeded = seeded;
  reseeded.seed = 1235;
  const auto other_seed = generate(s, {reseeded}, {keys.key(reseeded.seed, 0)}, 30);
  EXPECT_NE(alone[0], second_seq[0]);
  EXPECT_NE(alone[0], other_seed[0]);
}

TEST(Sampler, UnseededSequencesDrawFromTheEngineRng) {
  SequenceKeySource a(1), b(1), c(2);
  const uint64_t ka = a.key(std::nullopt, 0);
  EXPECT_EQ(ka, b.key(std::nullopt, 0));  // --seed makes the engine reproducible
  EXPECT_NE(ka, c.key(std::nullopt, 0));
  EXPECT_NE(ka, a.key(std::nullopt, 0));  // each sequence its own stream
}

TEST(Sampler, LogprobsAreTheRawLogSoftmax) {
  const std::vector<float> raw = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f, 0.5f};
  double z = 0.0;
  for (float x : raw) z += std::exp(double{x});
  auto log_softmax = [&](int i) { return static_cast<float>(raw[i] - std::log(z)); };
  LoweredSampler s(6, {});
  SamplingParams p;
  p.logprobs = 3;
  p.temperature = 0.7;
  p.top_k = 2;
  p.logit_bias = {{0, 50.0}};  // forces token 0; its logprob is still the raw one
  p.repetition_penalty = 1.3;
  const SampleOutput out = sample_one(s, raw, p, {1, 2});
  EXPECT_EQ(out.token_id, 0);
  EXPECT_NEAR(out.logprob, log_softmax(0), 1e-6);
  EXPECT_EQ(out.rank, 4);  // three raw logits are larger
  ASSERT_EQ(out.top_logprobs.size(), 3u);
  const int32_t expected_ids[] = {1, 3, 2};  // equal logits: lower id first
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(out.top_logprobs[i].token_id, expected_ids[i]);
    EXPECT_NEAR(out.top_logprobs[i].logprob, log_softmax(expected_ids[i]), 1e-6);
  }
  p.logprobs = 0;  // the sampled token's logprob only
  const SampleOutput only = sample_one(s, raw, p);
  EXPECT_TRUE(only.top_logprobs.empty());
  EXPECT_NEAR(only.logprob, log_softmax(only.token_id), 1e-6);
}

TEST(Sampler, MinTokensSuppressesEos) {
  LoweredSampler s(4, {3});
  SamplingParams p;
  p.temperature = 0.0;
  p.min_tokens = 2;
  const std::vector<float> eos_wins = {0.0f, 1.0f, 0.5f, 9.0f};
  EXPECT_EQ(sample_one(s, eos_wins, p, {}).token_id, 1);
  EXPECT_EQ(sample_one(s, eos_wins, p, {1}).token_id, 1);
  EXPECT_EQ(sample_one(s, eos_wins, p, {1, 1}).token_id, 3);
}

TEST(Sampler, FullQwenVocabularyWithEverySetting) {
  constexpr int64_t kVocab = 152064;
  LoweredSampler s(kVocab, {151643, 151645});
  const std::vector<float> logits = fake_logits(kVocab, {});
  SamplingParams p;
  p.seed = 3;
  p.top_k = 50;
  p.top_p = 0.9;
  p.min_p = 0.05;
  p.presence_penalty = 0.5;
  p.logprobs = 20;
  std::vector<int32_t> output = {5, 6, 151643};
  const SampleOutput a = sample_one(s, logits, p, output, seeded_sequence_key(3, 0));
  const SampleOutput b = sample_one(s, logits, p, output, seeded_sequence_key(3, 0));
  EXPECT_EQ(a.token_id, b.token_id);
  EXPECT_EQ(a.top_logprobs.size(), 20u);
  EXPECT_TRUE(std::is_sorted(a.top_logprobs.begin(), a.top_logprobs.end(),
                             [](auto& x, auto& y) { return x.logprob > y.logprob; }));
  std::vector<float> sorted = logits;
  // Penalties touch two tokens, so it lies in the raw top 52.
  std::nth_element(sorted.begin(), sorted.begin() + 51, sorted.end(), std::greater<>());
  EXPECT_GE(logits[a.token_id], sorted[51]);
}

}  // namespace
}  // namespace s4kv::engine
