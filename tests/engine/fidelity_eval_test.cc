// The two-pass evaluator on fake backends whose logits are known in closed form, so every
// metric can be checked by hand: identical formats give zero divergence; a known distortion
// gives the KL, agreement and perplexities computed here independently.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "engine/fidelity_eval.h"

namespace s4kv::engine {
namespace {

// Vocabulary of 2. Logits depend only on whether the last token fed is even; `shift` is added
// to token 0's logit. The fake checks the batch the evaluator builds (one sequence, positions
// continuing where the cache ends) and records how many tokens it has seen.
class FakeBackend : public backend::HostSamplingBackend {
 public:
  // odd_only: the shift applies only after an odd token. first_tokens: where to record the
  // first token of every sequence (position 0), or nullptr.
  FakeBackend(int64_t num_blocks, float shift, bool odd_only = false,
              std::vector<int32_t>* first_tokens = nullptr)
      : HostSamplingBackend(2), shift_(shift), odd_only_(odd_only), first_tokens_(first_tokens) {
    kv_.num_blocks = num_blocks;
    kv_.block_size = 16;
  }
  std::string_view name() const override { return "fake"; }
  int64_t vocab_size() const override { return 2; }
  const backend::KvCacheConfig& kv_cache_config() const override { return kv_; }
  Status init_kv_cache(const backend::KvCacheConfig& kv) override {
    return kv.num_blocks == kv_.num_blocks ? Status::ok() : invalid_argument("fake: num_blocks");
  }

 protected:
  std::span<const float> run_logits(const backend::ForwardBatch& b) override {
    backend::check_forward_batch(b, kv_, 2);
    EXPECT_EQ(b.num_seqs(), 1);
    EXPECT_EQ(b.num_logits(), 1);
    if (first_tokens_ != nullptr && b.positions[0] == 0) first_tokens_->push_back(b.token_ids[0]);
    const int32_t last = b.token_ids[static_cast<size_t>(b.logits_indices[0])];
    // Even token: p = (0.5, 0.5) for the reference. Odd token: p = (e/(1+e), 1/(1+e)).
    const float shift = odd_only_ && last % 2 == 0 ? 0.0f : shift_;
    logits_ = {(last % 2 == 0 ? 0.0f : 1.0f) + shift, 0.0f};
    return logits_;
  }

 private:
  float shift_;
  bool odd_only_;
  std::vector<int32_t>* first_tokens_;
  backend::KvCacheConfig kv_;
  std::vector<float> logits_;
};

BackendFactory fake(float shift, bool odd_only = false,
                    std::vector<int32_t>* first_tokens = nullptr) {
  return [=](int64_t num_tokens) -> Result<std::unique_ptr<backend::Backend>> {
    return std::unique_ptr<backend::Backend>(
        new FakeBackend((num_tokens + 15) / 16, shift, odd_only, first_tokens));
  };
}

FidelityOptions small() {
  FidelityOptions o;
  o.prefix_len = 20;
  o.continuation_len = 5;
  o.num_windows = 3;
  o.greedy_len = 4;
  o.prefill_chunk = 7;
  return o;
}

TEST(FidelityEval, WindowsSpreadAndRefuseShortText) {
  auto s = window_starts(100, small());
  ASSERT_TRUE(s.is_ok());
  EXPECT_EQ(*s, (std::vector<int64_t>{0, 37, 75}));
  EXPECT_FALSE(window_starts(24, small()).is_ok());
  FidelityOptions bad = small();
  bad.continuation_len = 1;
  EXPECT_FALSE(window_starts(100, bad).is_ok());
}

TEST(FidelityEval, IdenticalFormatsAgreeExactly) {
  std::vector<int32_t> tokens(100);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i % 2);
  auto r = evaluate_fidelity(tokens, small(), fake(0), fake(0));
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->num_windows, 3);
  EXPECT_EQ(r->num_positions, 3 * 4);  // continuation_len - 1 per window
  EXPECT_EQ(r->mean_kl, 0.0);
  EXPECT_EQ(r->top1_agreement, 1.0);
  EXPECT_EQ(r->ppl_reference, r->ppl_test);
  EXPECT_EQ(r->greedy_match_rate, 1.0);
  EXPECT_EQ(r->mean_first_divergence, 4.0);
}

TEST(FidelityEval, KnownDistortionGivesHandComputedMetrics) {
  // All tokens 0 (even): reference p = (0.5, 0.5); the test shifts token 0 by ln 3, so
  // q = (0.75, 0.25). The true next token is always 0.
  std::vector<int32_t> tokens(100, 0);
  auto r = evaluate_fidelity(tokens, small(), fake(0), fake(std::log(3.0f)));
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  const double kl = 0.5 * std::log(0.5 / 0.75) + 0.5 * std::log(0.5 / 0.25);
  EXPECT_NEAR(r->mean_kl, kl, 1e-6);
  EXPECT_NEAR(r->max_kl, kl, 1e-6);
  EXPECT_EQ(r->top1_agreement, 1.0);      // both pick token 0 (a tie picks the lower id)
  EXPECT_EQ(r->confident_fraction, 1.0);  // reference top-1 p = 0.5 counts as confident
  EXPECT_NEAR(r->ppl_reference, 2.0, 1e-6);
  EXPECT_NEAR(r->ppl_test, 4.0 / 3.0, 1e-6);
  EXPECT_EQ(r->greedy_match_rate, 1.0);
}

TEST(FidelityEval, DisagreementAndGreedyDivergenceAreCounted) {
  // All tokens 1 (odd): reference logits (1, 0) pick 0; the test's (1 - 2, 0) pick 1. Greedy:
  // the reference then sees 0 and keeps picking 0, the test sees 1 and keeps picking 1.
  std::vector<int32_t> tokens(100, 1);
  auto r = evaluate_fidelity(tokens, small(), fake(0), fake(-2.0f));
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->top1_agreement, 0.0);
  EXPECT_NEAR(r->confident_fraction, 1.0, 0);  // p = e/(1+e) = 0.73
  EXPECT_EQ(r->confident_agreement, 0.0);
  EXPECT_GT(r->mean_kl, 0.1);
  EXPECT_EQ(r->greedy_match_rate, 0.0);
  EXPECT_EQ(r->mean_first_divergence, 0.0);
}

// Four windows (starts 0, 25, 50, 75 of 100 tokens), the last two with odd continuations: KL
// is 0 at the first 8 positions and k at the last 8. Tails and window maxima follow by hand;
// a bootstrap resample of 4 windows is all-even or all-odd with probability 1/16 each, so with
// 1000 resamples the 2.5th and 97.5th percentiles are 0 and k for every mean-like metric.
TEST(FidelityEval, TailsWindowMaximaAndBootstrapIntervals) {
  FidelityOptions o = small();
  o.num_windows = 4;
  std::vector<int32_t> tokens(100, 0);
  for (int64_t i = 50; i < 100; ++i) tokens[static_cast<size_t>(i)] = 1;
  const float shift = std::log(3.0f);
  auto r = evaluate_fidelity(tokens, o, fake(0), fake(shift, /*odd_only=*/true));
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  // Reference after an odd token: p0 = e/(1+e); test: 3e/(3e+1).
  const double p = std::exp(1.0) / (1 + std::exp(1.0)),
               q = 3 * std::exp(1.0) / (3 * std::exp(1.0) + 1);
  const double k = p * std::log(p / q) + (1 - p) * std::log((1 - p) / (1 - q));
  EXPECT_EQ(r->num_positions, 16);
  EXPECT_NEAR(r->mean_kl, k / 2, 1e-6);
  EXPECT_NEAR(r->p99_kl, k, 1e-6);
  EXPECT_NEAR(r->max_kl, k, 1e-6);
  EXPECT_NEAR(r->second_max_kl, k, 1e-6);
  EXPECT_EQ(r->window_max_kl_min, 0.0);
  EXPECT_EQ(r->window_max_kl_median, 0.0);  // nearest rank: the 2nd smallest of 4
  EXPECT_EQ(r->bootstrap_resamples, 1000);
  EXPECT_EQ(r->mean_kl_ci.lo, 0.0);
  EXPECT_NEAR(r->mean_kl_ci.hi, k, 1e-6);
  EXPECT_EQ(r->max_kl_ci.lo, 0.0);
  EXPECT_NEAR(r->max_kl_ci.hi, k, 1e-6);
  EXPECT_LE(r->ppl_change_ci.lo, 0.0);  // all-even resamples: no change
  EXPECT_EQ(r->top1_ci.lo, 1.0);        // the shift never flips the top-1 here
  const auto again = evaluate_fidelity(tokens, o, fake(0), fake(shift, true));
  EXPECT_EQ(again->mean_kl_ci.lo, r->mean_kl_ci.lo);  // a fixed seed: deterministic
  EXPECT_EQ(again->p99_kl_ci.hi, r->p99_kl_ci.hi);

  o.bootstrap_resamples = 0;
  auto none = evaluate_fidelity(tokens, o, fake(0), fake(shift, true));
  EXPECT_EQ(none->mean_kl_ci.hi, 0.0);
  EXPECT_EQ(none->mean_kl, r->mean_kl);
}

TEST(FidelityEval, FirstTokenStartsEveryWindow) {
  FidelityOptions o = small();
  o.first_token = 1;
  std::vector<int32_t> tokens(100, 0), firsts;
  auto r = evaluate_fidelity(tokens, o, fake(0, false, &firsts), fake(0));
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->num_positions, 3 * 4);
  // Per window: the teacher-forced sequence and the greedy one.
  EXPECT_EQ(firsts, std::vector<int32_t>(6, 1));
}

// Several tested backends share one reference pass; each result equals a run of that backend
// alone, and a backend that fails to build fails the whole evaluation.
TEST(FidelityEval, SharedReferenceGivesEachBackendItsOwnResult) {
  FidelityOptions o = small();
  o.num_windows = 4;
  std::vector<int32_t> tokens(100, 0);
  for (int64_t i = 50; i < 100; ++i) tokens[static_cast<size_t>(i)] = 1;
  const std::vector<BackendFactory> tests = {fake(std::log(3.0f), true), fake(-2.0f), fake(0)};
  auto all = evaluate_fidelity(tokens, o, fake(0), tests);
  ASSERT_TRUE(all.is_ok()) << all.status().message();
  ASSERT_EQ(all->size(), 3u);
  for (size_t i = 0; i < tests.size(); ++i) {
    auto one = evaluate_fidelity(tokens, o, fake(0), tests[i]);
    ASSERT_TRUE(one.is_ok());
    const FidelityResult& a = (*all)[i];
    EXPECT_EQ(a.mean_kl, one->mean_kl) << i;
    EXPECT_EQ(a.p99_kl, one->p99_kl) << i;
    EXPECT_EQ(a.mean_kl_ci.hi, one->mean_kl_ci.hi) << i;
    EXPECT_EQ(a.top1_agreement, one->top1_agreement) << i;
    EXPECT_EQ(a.ppl_test, one->ppl_test) << i;
    EXPECT_EQ(a.mean_first_divergence, one->mean_first_divergence) << i;
  }
  EXPECT_GT((*all)[0].mean_kl, 0.0);
  EXPECT_NE((*all)[0].mean_kl, (*all)[1].mean_kl);
  EXPECT_EQ((*all)[2].mean_kl, 0.0);

  const BackendFactory broken = [](int64_t) -> Result<std::unique_ptr<backend::Backend>> {
    return invalid_argument("no such format");
  };
  const std::vector<BackendFactory> with_broken = {fake(0), broken};
  auto failed = evaluate_fidelity(tokens, o, fake(0), with_broken);
  ASSERT_FALSE(failed.is_ok());
  EXPECT_EQ(failed.status().message(), "no such format");
}

}  // namespace
}  // namespace s4kv::engine
