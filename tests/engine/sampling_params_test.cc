// SamplingParams::validate: every bad field is a request error naming the field; limits hold.
#include "engine/sampling_params.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

namespace s4kv::engine {
namespace {

constexpr int64_t kVocab = 1000;
constexpr int64_t kMaxLen = 4096;

// Expects validate to fail with a message whose param is `field`.
void expect_bad(const std::function<void(SamplingParams&)>& edit, std::string_view field) {
  SamplingParams p;
  edit(p);
  const Status s = p.validate(kVocab, kMaxLen);
  ASSERT_FALSE(s.is_ok()) << "accepted, expected an error on " << field;
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(error_param(s.message()), field) << s.message();
}

TEST(SamplingParams, DefaultsAreVllms) {
  SamplingParams p;
  EXPECT_EQ(p.n, 1);
  EXPECT_EQ(p.temperature, 1.0);
  EXPECT_EQ(p.top_p, 1.0);
  EXPECT_EQ(p.top_k, 0);
  EXPECT_EQ(p.min_p, 0.0);
  EXPECT_EQ(p.repetition_penalty, 1.0);
  EXPECT_FALSE(p.seed.has_value());
  EXPECT_FALSE(p.logprobs.has_value());
  EXPECT_FALSE(p.max_tokens.has_value());
  EXPECT_TRUE(p.skip_special_tokens);
  EXPECT_FALSE(p.ignore_eos);
  EXPECT_FALSE(p.greedy());
  EXPECT_TRUE(p.validate(kVocab, kMaxLen).is_ok());
}

TEST(SamplingParams, AcceptsEdgesOfRanges) {
  SamplingParams p;
  p.temperature = 0.0;
  p.top_k = -1;
  p.min_p = 1.0;
  p.presence_penalty = -2.0;
  p.frequency_penalty = 2.0;
  p.repetition_penalty = 5.0;
  p.logprobs = 20;
  p.max_tokens = kMaxLen;
  p.min_tokens = kMaxLen;
  p.logit_bias = {{0, -100.0}, {kVocab - 1, 500.0}};  // values beyond 100 are clamped
  p.stop_token_ids = {0, kVocab - 1};
  p.stop = {"a", std::string(kMaxStopStringBytes, 'x')};
  p.seed = -5;
  EXPECT_TRUE(p.validate(kVocab, kMaxLen).is_ok());
  EXPECT_TRUE(p.greedy());
  p.top_k = 1;
  p.temperature = 9e-6;  // below vLLM's epsilon: greedy
  EXPECT_TRUE(p.greedy());
}

TEST(SamplingParams, RefusesEachBadField) {
  const double nan = std::nan("");
  const double inf = std::numeric_limits<double>::infinity();
  expect_bad([](SamplingParams& p) { p.temperature = -0.1; }, "temperature");
  expect_bad([&](SamplingParams& p) { p.temperature = nan; }, "temperature");
  expect_bad([&](SamplingParams& p) { p.temperature = inf; }, "temperature");
  expect_bad([](SamplingParams& p) { p.top_p = 0.0; }, "top_p");
  expect_bad([](SamplingParams& p) { p.top_p = 1.01; }, "top_p");
  expect_bad([&](SamplingParams& p) { p.top_p = nan; }, "top_p");
  expect_bad([](SamplingParams& p) { p.top_k = -2; }, "top_k");
  expect_bad([](SamplingParams& p) { p.min_p = -0.01; }, "min_p");
  expect_bad([](SamplingParams& p) { p.min_p = 1.5; }, "min_p");
  expect_bad([](SamplingParams& p) { p.presence_penalty = 2.5; }, "presence_penalty");
  expect_bad([](SamplingParams& p) { p.frequency_penalty = -2.5; }, "frequency_penalty");
  expect_bad([](SamplingParams& p) { p.repetition_penalty = 0.0; }, "repetition_penalty");
  expect_bad([&](SamplingParams& p) { p.repetition_penalty = nan; }, "repetition_penalty");
  expect_bad([](SamplingParams& p) { p.n = 0; }, "n");
  expect_bad([](SamplingParams& p) { p.n = kMaxN + 1; }, "n");
  expect_bad([](SamplingParams& p) { p.logprobs = -1; }, "logprobs");
  expect_bad([](SamplingParams& p) { p.logprobs = 21; }, "logprobs");
  expect_bad([](SamplingParams& p) { p.max_tokens = 0; }, "max_tokens");
  expect_bad([](SamplingParams& p) { p.max_tokens = -3; }, "max_tokens");
  expect_bad([](SamplingParams& p) { p.max_tokens = kMaxLen + 1; }, "max_tokens");
  expect_bad([](SamplingParams& p) { p.min_tokens = -1; }, "min_tokens");
  expect_bad(
      [](SamplingParams& p) {
        p.max_tokens = 5;
        p.min_tokens = 6;
      },
      "min_tokens");
  expect_bad([](SamplingParams& p) { p.min_tokens = kMaxLen + 1; }, "min_tokens");
}

TEST(SamplingParams, GreedyWithSeveralSequencesIsRefusedAsVllm) {
  expect_bad(
      [](SamplingParams& p) {
        p.temperature = 0.0;
        p.n = 2;
      },
      "n");
}

TEST(SamplingParams, OutOfVocabularyIdsAreRequestErrors) {
  expect_bad([](SamplingParams& p) { p.logit_bias = {{kVocab, 1.0}}; }, "logit_bias");
  expect_bad([](SamplingParams& p) { p.logit_bias = {{-1, 1.0}}; }, "logit_bias");
  expect_bad([](SamplingParams& p) { p.logit_bias = {{int64_t{1} << 40, 1.0}}; }, "logit_bias");
  expect_bad([](SamplingParams& p) { p.logit_bias = {{3, std::nan("")}}; }, "logit_bias");
  expect_bad([](SamplingParams& p) { p.stop_token_ids = {5, kVocab}; }, "stop_token_ids");
  expect_bad([](SamplingParams& p) { p.stop_token_ids = {-7}; }, "stop_token_ids");
  expect_bad([](SamplingParams& p) { p.stop_token_ids.assign(kMaxStopTokenIds + 1, 1); },
             "stop_token_ids");
}

TEST(SamplingParams, StopStringsAreBounded) {
  expect_bad([](SamplingParams& p) { p.stop = {"ok", ""}; }, "stop");
  expect_bad([](SamplingParams& p) { p.stop.assign(kMaxStopStrings + 1, "x"); }, "stop");
  expect_bad([](SamplingParams& p) { p.stop = {std::string(kMaxStopStringBytes + 1, 'x')}; },
             "stop");
}

TEST(SamplingParams, MessagesReadLikeVllms) {
  SamplingParams p;
  p.top_p = 0.0;
  EXPECT_EQ(p.validate(kVocab, kMaxLen).message(), "top_p must be in (0, 1], got 0.");
}

TEST(SamplingParams, ResolveMaxTokens) {
  SamplingParams p;
  EXPECT_EQ(resolve_max_tokens(p, 100, 4096).value(), 3996);
  p.max_tokens = 10;
  EXPECT_EQ(resolve_max_tokens(p, 100, 4096).value(), 10);
  EXPECT_EQ(resolve_max_tokens(p, 4086, 4096).value(), 10);
  auto r = resolve_max_tokens(p, 4087, 4096);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(error_param(r.status().message()), "max_tokens");
  EXPECT_NE(r.status().message().find("4087 in the messages, 10 in the completion"),
            std::string::npos);
  p.max_tokens.reset();
  EXPECT_FALSE(resolve_max_tokens(p, 4096, 4096).is_ok());  // nothing left to generate
}

}  // namespace
}  // namespace s4kv::engine
