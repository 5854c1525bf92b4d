// Each sampling step (backend/sampling.h) on hand-made logits against hand-computed values.
#include "backend/sampling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <utility>
#include <vector>

namespace s4kv::backend {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// token id -> probability of the distribution built from `logits`.
std::map<int32_t, double> distribution(const std::vector<float>& logits, const SamplingRow& p) {
  SamplingDistribution d;
  d.build(logits, p);
  std::map<int32_t, double> m;
  for (const auto& c : d.candidates()) m[c.token_id] = c.prob;
  return m;
}

std::vector<float> logs(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

TEST(LogitsProcessors, LogitBiasAdds) {
  std::vector<float> l = {1.0f, 2.0f, 3.0f};
  const std::vector<std::pair<int32_t, float>> bias = {{0, 2.5f}, {2, -100.0f}};
  SamplingRow p;
  p.logit_bias = bias;
  apply_logit_bias(l, p);
  EXPECT_EQ(l, (std::vector<float>{3.5f, 2.0f, -97.0f}));
}

TEST(LogitsProcessors, MinTokensMasksEosAndStopIdsUntilReached) {
  SamplingRow p;
  p.min_tokens = 2;
  const std::vector<int32_t> stop_and_eos = {1, 3}, one = {5}, two = {5, 6};
  p.min_tokens_masked_ids = stop_and_eos;
  std::vector<float> l = {0.0f, 1.0f, 2.0f, 3.0f};
  p.output_token_ids = one;
  apply_min_tokens(l, p);
  EXPECT_EQ(l, (std::vector<float>{0.0f, kNegInf, 2.0f, kNegInf}));
  std::vector<float> after = {0.0f, 1.0f, 2.0f, 3.0f};
  p.output_token_ids = two;
  apply_min_tokens(after, p);
  EXPECT_EQ(after, (std::vector<float>{0.0f, 1.0f, 2.0f, 3.0f}));
}

TEST(LogitsProcessors, PenaltiesMatchHandComputedValues) {
  SamplingRow p;
  p.repetition_penalty = 2.0;
  p.frequency_penalty = 0.5;
  p.presence_penalty = 0.25;
  const std::vector<int32_t> prompt = {0, 1, 0};
  const std::vector<int32_t> output = {2, 2, 1};
  p.prompt_token_ids = prompt;
  p.output_token_ids = output;
  PenaltyScratch scratch(5);
  // Twice: the scratch must not leak state from one row into the next.
  for (int round = 0; round < 2; ++round) {
    std::vector<float> l = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f};
    apply_penalties(l, p, scratch);
    // 0: 2/2; 1: -1*2 - (0.5*1 + 0.25); 2: 0.5/2 - (0.5*2 + 0.25); 3, 4: untouched.
    EXPECT_EQ(l, (std::vector<float>{1.0f, -2.75f, -1.0f, 3.0f, -2.0f}));
  }
}

TEST(LogitsProcessors, NoPenaltiesLeaveLogitsAlone) {
  SamplingRow p;
  const std::vector<int32_t> prompt = {0, 1}, output = {2};
  p.prompt_token_ids = prompt;
  p.output_token_ids = output;
  PenaltyScratch scratch(3);
  std::vector<float> l = {1.0f, -1.0f, 0.0f};
  apply_penalties(l, p, scratch);
  EXPECT_EQ(l, (std::vector<float>{1.0f, -1.0f, 0.0f}));
}

TEST(LogitsProcessors, ArgmaxTakesTheLowestIndexAmongEquals) {
  EXPECT_EQ(argmax(std::vector<float>{1.0f, 3.0f, 3.0f, 2.0f}), 1);
  EXPECT_EQ(argmax(std::vector<float>{kNegInf, kNegInf, -5.0f}), 2);
  EXPECT_EQ(argmax(std::vector<float>{0.0f}), 0);
}

TEST(SamplingDistribution, TemperatureScalesTheSoftmax) {
  SamplingRow p;
  auto d = distribution(logs({1, 2, 4}), p);
  EXPECT_NEAR(d[0], 1.0 / 7, 1e-6);
  EXPECT_NEAR(d[1], 2.0 / 7, 1e-6);
  EXPECT_NEAR(d[2], 4.0 / 7, 1e-6);
  p.temperature = 0.5;  // squares the probabilities
  d = distribution(logs({1, 2, 4}), p);
  EXPECT_NEAR(d[0], 1.0 / 21, 1e-6);
  EXPECT_NEAR(d[2], 16.0 / 21, 1e-6);
}

TEST(SamplingDistribution, TopKKeepsTheKBestAndTies) {
  SamplingRow p;
  p.top_k = 2;
  auto d = distribution({1.0f, 5.0f, 3.0f, 4.0f}, p);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_NEAR(d[1], 1.0 / (1.0 + std::exp(-1.0)), 1e-6);
  EXPECT_NEAR(d[3], std::exp(-1.0) / (1.0 + std::exp(-1.0)), 1e-6);
  d = distribution({5.0f, 3.0f, 3.0f, 1.0f}, p);  // the 2nd and 3rd tie: both stay
  EXPECT_EQ(d.size(), 3u);
  EXPECT_FALSE(d.contains(3));
  p.top_k = 10;  // more than the vocabulary: off
  EXPECT_EQ(distribution({5.0f, 3.0f, 3.0f, 1.0f}, p).size(), 4u);
}

TEST(SamplingDistribution, TopPKeepsTheSmallestSetReachingP) {
  const std::vector<float> l = logs({0.5, 0.3, 0.15, 0.05});
  SamplingRow p;
  p.top_p = 0.75;
  auto d = distribution(l, p);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_NEAR(d[0], 0.5 / 0.8, 1e-6);
  EXPECT_NEAR(d[1], 0.3 / 0.8, 1e-6);
  p.top_p = 0.81;
  EXPECT_EQ(distribution(l, p).size(), 3u);
  p.top_p = 0.1;  // the most likely token always stays
  d = distribution(l, p);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_NEAR(d[0], 1.0, 1e-12);
}

TEST(SamplingDistribution, MinPIsRelativeToTheMostLikely) {
  const std::vector<float> l = logs({0.5, 0.3, 0.15, 0.05});
  SamplingRow p;
  p.min_p = 0.2;  // threshold 0.1
  auto d = distribution(l, p);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_NEAR(d[2], 0.15 / 0.95, 1e-6);
  p.min_p = 0.5;  // threshold 0.25
  EXPECT_EQ(distribution(l, p).size(), 2u);
}

TEST(SamplingDistribution, StepsComposeInOrder) {
  // top_k 3 drops token 3; top_p 0.7 over {0.5, 0.3, 0.15}/0.95 keeps {0, 1}; min_p 0.7
  // then drops token 1 (0.3 < 0.7 * 0.5).
  SamplingRow p;
  p.top_k = 3;
  p.top_p = 0.7;
  auto d = distribution(logs({0.5, 0.3, 0.15, 0.05}), p);
  EXPECT_EQ(d.size(), 2u);
  p.min_p = 0.7;
  d = distribution(logs({0.5, 0.3, 0.15, 0.05}), p);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_TRUE(d.contains(0));
}

TEST(SamplingDistribution, MaskedTokensAreNeverCandidates) {
  SamplingRow p;
  auto d = distribution({kNegInf, 0.0f, kNegInf, 0.0f}, p);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_NEAR(d[1], 0.5, 1e-12);
  // Everything masked: falls back to a single token instead of failing.
  EXPECT_EQ(distribution({kNegInf, kNegInf}, p).size(), 1u);
}

TEST(SamplingDistribution, SampleWalksTheCumulativeMass) {
  SamplingRow p;
  SamplingDistribution d;
  d.build(logs({0.25, 0.75}), p);
  EXPECT_EQ(d.sample(0.0), 0);
  EXPECT_EQ(d.sample(0.2499), 0);
  EXPECT_EQ(d.sample(0.2501), 1);
  EXPECT_EQ(d.sample(0.999999), 1);
}

}  // namespace
}  // namespace s4kv::backend
