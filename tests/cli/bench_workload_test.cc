// s4kv bench's workload (bench_workload.h): the random prompts draw only ordinary ids of the
// model's vocabulary (s4kv-tiny: 0..8188; its added tokens 8189..8191 are special), uniformly,
// exactly input_len of them, the same for the same seed; and numpy's percentiles.
#include "cli/bench_workload.h"

#include <gtest/gtest.h>

#include <set>

namespace s4kv::cli {
namespace {

tokenizer::Tokenizer tiny_tokenizer() {
  auto t = tokenizer::Tokenizer::from_file("models/s4kv-tiny/tokenizer.json");
  EXPECT_TRUE(t.is_ok()) << t.status().message();
  return std::move(t).value();
}

TEST(PromptTokenPool, LeavesOutAddedAndSpecialTokens) {
  const tokenizer::Tokenizer tok = tiny_tokenizer();
  const std::vector<int32_t> pool = prompt_token_pool(tok, 8192);
  ASSERT_EQ(pool.size(), 8189u);
  EXPECT_EQ(pool.front(), 0);
  EXPECT_EQ(pool.back(), 8188);
  const std::set<int32_t> ids(pool.begin(), pool.end());
  for (const tokenizer::AddedToken& t : tok.added_tokens()) EXPECT_EQ(ids.count(t.id), 0u) << t.id;
  for (int32_t id : pool) EXPECT_FALSE(tok.is_special(id)) << id;
}

TEST(PromptTokenPool, StaysInsideTheModelVocabulary) {
  // A model vocabulary smaller than the tokenizer's: ids at or above it are left out.
  const std::vector<int32_t> pool = prompt_token_pool(tiny_tokenizer(), 100);
  ASSERT_EQ(pool.size(), 100u);
  EXPECT_EQ(pool.back(), 99);
}

TEST(RandomPrompts, ExactLengthsFromThePoolSeeded) {
  const std::vector<int32_t> pool = {3, 5, 7, 11};
  const auto a = random_prompts(pool, 6, 17, 42);
  ASSERT_EQ(a.size(), 6u);
  for (const auto& p : a) {
    ASSERT_EQ(p.size(), 17u);
    for (int32_t id : p) EXPECT_TRUE(id == 3 || id == 5 || id == 7 || id == 11) << id;
  }
  EXPECT_EQ(a, random_prompts(pool, 6, 17, 42));
  EXPECT_NE(a, random_prompts(pool, 6, 17, 43));
  EXPECT_NE(a[0], a[1]);
}

TEST(RandomPrompts, Uniform) {
  // 100,000 draws over 10 ids: each count within 5 % of 10,000 (about 5 standard deviations).
  std::vector<int32_t> pool(10);
  for (int32_t i = 0; i < 10; ++i) pool[static_cast<size_t>(i)] = 100 + i;
  std::vector<int> counts(10, 0);
  for (const auto& p : random_prompts(pool, 100, 1000, 7)) {
    for (int32_t id : p) ++counts[static_cast<size_t>(id - 100)];
  }
  for (int c : counts) EXPECT_NEAR(c, 10000, 500);
}

TEST(Percentile, InterpolatesAsNumpy) {
  const std::vector<double> v = {4.0, 1.0, 3.0, 2.0};  // unsorted on purpose
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1.0);
  EXPECT_DOUBLE_EQ(percentile(v, 100), 4.0);
  EXPECT_DOUBLE_EQ(percentile(v, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile(v, 10), 1.3);  // numpy.percentile([1, 2, 3, 4], 10)
  EXPECT_DOUBLE_EQ(percentile(v, 99), 3.97);
  EXPECT_DOUBLE_EQ(percentile({5.0}, 90), 5.0);
  EXPECT_DOUBLE_EQ(mean(v), 2.5);
}

}  // namespace
}  // namespace s4kv::cli
