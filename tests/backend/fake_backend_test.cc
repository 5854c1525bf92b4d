// FakeBackend (fake_backend.h), the test double the engine and server tests rely on: its
// logits are the cache-free reference whatever the batch and chunking; a wrong block table is
// seen (stale reads, another output); the latch holds forward() until released.
#include "fake_backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <thread>
#include <vector>

#include "batch_builder.h"

namespace s4kv::backend::testing {
namespace {

constexpr int64_t kVocab = 500, kBlockSize = 4, kNumBlocks = 64, kMaxBlocks = 16;

KvCacheConfig kv_config() {
  KvCacheConfig c;
  c.num_blocks = kNumBlocks;
  c.block_size = kBlockSize;
  return c;
}

int32_t argmax(std::span<const float> row) {
  return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

std::vector<int32_t> tokens(int n, int salt) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = (i * 37 + salt * 11) % kVocab;
  return t;
}

std::vector<int32_t> table(int32_t first) {
  std::vector<int32_t> t(kMaxBlocks);
  std::iota(t.begin(), t.end(), first);
  return t;
}

TEST(FakeBackend, LogitsAreTheReferenceWhateverTheBatchAndChunking) {
  auto probe = std::make_shared<FakeBackendProbe>();
  FakeBackend backend(kv_config(), kVocab, probe);
  const auto a = tokens(13, 1), b = tokens(9, 2);
  const auto ta = table(0), tb = table(20);

  // a alone, in one prefill.
  BatchBuilder one(kBlockSize, kMaxBlocks);
  one.add(a, 0, ta);
  one.want_all_logits();
  const auto alone = backend.forward(one.batch()).logits;
  std::vector<float> alone_rows(alone.begin(), alone.end());
  for (size_t j = 0; j < a.size(); ++j) {
    const auto row = std::span(alone_rows).subspan(j * kVocab, kVocab);
    EXPECT_EQ(argmax(row), fake_next_token(std::span(a).first(j + 1), kVocab)) << j;
    EXPECT_EQ(row[static_cast<size_t>(argmax(row))], kTopLogit);
  }

  // a again in chunks of 5, batched with b: every row of a bit-identical to the alone run.
  std::vector<float> batched;
  for (size_t begin = 0; begin < a.size(); begin += 5) {
    const size_t end = std::min(a.size(), begin + 5);
    BatchBuilder mixed(kBlockSize, kMaxBlocks);
    const size_t b_end = std::min(b.size(), end);
    if (begin < b_end) mixed.add(std::span(b).subspan(begin, b_end - begin), begin, tb);
    const int32_t row0 = mixed.add(std::span(a).subspan(begin, end - begin), begin, table(40));
    for (size_t j = begin; j < end; ++j) mixed.want_logits(row0 + static_cast<int32_t>(j - begin));
    const auto out = backend.forward(mixed.batch()).logits;
    batched.insert(batched.end(), out.begin(), out.end());
  }
  EXPECT_EQ(batched, alone_rows);
  EXPECT_EQ(probe->num_stale_reads.load(), 0);
  EXPECT_GT(probe->num_forward_calls.load(), 3);
}

TEST(FakeBackend, AWrongBlockTableIsSeen) {
  auto probe = std::make_shared<FakeBackendProbe>();
  FakeBackend backend(kv_config(), kVocab, probe);
  const auto a = tokens(10, 3), b = tokens(10, 4);
  BatchBuilder fill(kBlockSize, kMaxBlocks);
  fill.add(a, 0, table(0));
  fill.add(b, 0, table(20));
  (void)backend.forward(fill.batch()).logits;
  ASSERT_EQ(probe->num_stale_reads.load(), 0);

  // The next token of a, decoded with b's first block in its table: another output, and seen.
  auto wrong = table(0);
  wrong[0] = 20;
  BatchBuilder step(kBlockSize, kMaxBlocks);
  step.add(std::span(a).last(1), 9, wrong);
  step.want_logits(0);
  const int32_t got = argmax(backend.forward(step.batch()).logits);
  EXPECT_GT(probe->num_stale_reads.load(), 0);
  EXPECT_NE(got, fake_next_token(a, kVocab));
}

TEST(FakeBackend, LatchHoldsAStepUntilReleased) {
  auto probe = std::make_shared<FakeBackendProbe>();
  FakeBackend backend(kv_config(), kVocab, probe);
  const auto a = tokens(3, 5);
  probe->latch.arm();
  std::thread engine([&] {
    BatchBuilder b(kBlockSize, kMaxBlocks);
    b.add(a, 0, table(0));
    b.want_logits(2);
    (void)backend.forward(b.batch()).logits;
  });
  ASSERT_TRUE(probe->latch.wait_held(std::chrono::seconds(30)));
  EXPECT_EQ(probe->num_forward_calls.load(), 0);  // held before it does anything
  probe->latch.release();
  engine.join();
  EXPECT_EQ(probe->num_forward_calls.load(), 1);
}

TEST(FakeBackend, GreedyReferenceChainsItsOwnOutputs) {
  const auto prompt = tokens(6, 7);
  const auto out = fake_greedy(prompt, 4, kVocab);
  ASSERT_EQ(out.size(), 4u);
  auto ctx = prompt;
  for (int32_t t : out) {
    EXPECT_EQ(t, fake_next_token(ctx, kVocab));
    ctx.push_back(t);
  }
}

}  // namespace
}  // namespace s4kv::backend::testing
