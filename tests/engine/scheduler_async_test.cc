// Scheduler::schedule_ahead (async scheduling): output placeholders, the placeholder token of a
// request that samples in the step in flight, ends known in advance (max_tokens,
// max_model_len) never scheduled past, the refusal instead of preemption, and a request that
// finishes while the step after it is in flight.
#include <gtest/gtest.h>

#include <numeric>

#include "engine/scheduler.h"

namespace s4kv::engine {
namespace {

constexpr uint64_t kSalt = 0x5eed;

std::vector<int32_t> iota_tokens(int n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), 0);
  return t;
}

SchedulerConfig config(int64_t max_model_len = 64) {
  SchedulerConfig c;
  c.max_num_batched_tokens = 64;
  c.max_num_seqs = 8;
  c.max_model_len = max_model_len;
  return c;
}

CacheConfig cache(int num_blocks) { return CacheConfig{num_blocks, 4, true, kSalt}; }

TEST(SchedulerAhead, PlaceholdersUntilMaxTokens) {
  Scheduler s(config(), cache(32));
  ASSERT_TRUE(s.add_request(1, iota_tokens(10), /*max_output_tokens=*/3).is_ok());
  const SchedulerOutput n0 = s.schedule();
  ASSERT_EQ(n0.scheduled.size(), 1u);
  EXPECT_TRUE(n0.scheduled[0].samples);
  const Request* r = s.get_request(1);
  EXPECT_EQ(r->num_computed_tokens(), 10);  // advanced at schedule time
  EXPECT_EQ(r->num_output_placeholders(), 1);

  // Step 1 on top of step 0: the decode token is step 0's sample, not known yet.
  std::optional<SchedulerOutput> n1 = s.schedule_ahead();
  ASSERT_TRUE(n1.has_value());
  ASSERT_EQ(n1->scheduled.size(), 1u);
  EXPECT_EQ(n1->scheduled[0].num_computed_tokens, 10);
  EXPECT_EQ(n1->scheduled[0].token_ids, std::vector<int32_t>{kPlaceholderTokenId});
  EXPECT_TRUE(n1->scheduled[0].samples);
  EXPECT_EQ(r->num_output_placeholders(), 2);
  EXPECT_EQ(s.num_steps_in_flight(), 2);
  s.check_invariants();

  ASSERT_EQ(s.update_from_output(n0, std::vector<int32_t>{40}).size(), 1u);
  EXPECT_EQ(r->num_output_placeholders(), 1);
  EXPECT_EQ(r->output_token_ids().back(), 40);
  std::optional<SchedulerOutput> n2 = s.schedule_ahead();
  ASSERT_TRUE(n2.has_value());
  ASSERT_EQ(n2->scheduled.size(), 1u);
  EXPECT_EQ(n2->scheduled[0].num_computed_tokens, 11);
  EXPECT_EQ(n2->scheduled[0].token_ids, std::vector<int32_t>{kPlaceholderTokenId});

  ASSERT_EQ(s.update_from_output(*n1, std::vector<int32_t>{41}).size(), 1u);
  // Two outputs and step 2's in flight make max_tokens: nothing more is scheduled.
  std::optional<SchedulerOutput> n3 = s.schedule_ahead();
  ASSERT_TRUE(n3.has_value());
  EXPECT_TRUE(n3->scheduled.empty());
  EXPECT_EQ(s.num_steps_in_flight(), 1);
  const std::vector<TokenOutput> last = s.update_from_output(*n2, std::vector<int32_t>{42});
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(r->output_token_ids().size(), 3u);
  EXPECT_EQ(r->num_output_placeholders(), 0);
  s.check_invariants();
  ASSERT_NE(s.finish(1, FinishReason::kLength), nullptr);
  s.check_invariants();
}

TEST(SchedulerAhead, NeverPastMaxModelLen) {
  Scheduler s(config(/*max_model_len=*/12), cache(32));
  ASSERT_TRUE(s.add_request(1, iota_tokens(10)).is_ok());
  const SchedulerOutput n0 = s.schedule();                 // samples token 11 of 12
  std::optional<SchedulerOutput> n1 = s.schedule_ahead();  // computes it, samples token 12
  ASSERT_TRUE(n1.has_value());
  ASSERT_EQ(n1->scheduled.size(), 1u);
  (void)s.update_from_output(n0, std::vector<int32_t>{1});
  std::optional<SchedulerOutput> n2 = s.schedule_ahead();
  ASSERT_TRUE(n2.has_value());
  EXPECT_TRUE(n2->scheduled.empty());  // token 12 is in flight and ends the request
  const std::vector<TokenOutput> last = s.update_from_output(*n1, std::vector<int32_t>{2});
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0].finish_reason, FinishReason::kLength);
  EXPECT_EQ(s.get_request(1), nullptr);
  s.check_invariants();
}

TEST(SchedulerAhead, RefusesWhenItWouldPreempt) {
  // Two requests of 8 tokens fill 4 of 5 blocks; their 9th tokens need two more.
  Scheduler s(config(/*max_model_len=*/16), cache(5));
  ASSERT_TRUE(s.add_request(1, iota_tokens(8)).is_ok());
  ASSERT_TRUE(s.add_request(2, iota_tokens(8)).is_ok());
  const SchedulerOutput n0 = s.schedule();
  ASSERT_EQ(n0.scheduled.size(), 2u);
  EXPECT_FALSE(s.schedule_ahead().has_value());
  EXPECT_EQ(s.num_steps_in_flight(), 1);  // nothing changed
  s.check_invariants();
  (void)s.update_from_output(n0, std::vector<int32_t>{5, 6});
  const SchedulerOutput n1 = s.schedule();  // the synchronous step preempts
  EXPECT_EQ(n1.preempted_ids, std::vector<RequestId>{2});
  s.check_invariants();
}

TEST(SchedulerAhead, FinishedWhileTheNextStepIsInFlight) {
  Scheduler s(config(), cache(32));
  ASSERT_TRUE(s.add_request(1, iota_tokens(6)).is_ok());
  ASSERT_TRUE(s.add_request(2, iota_tokens(7)).is_ok());
  const SchedulerOutput n0 = s.schedule();
  std::optional<SchedulerOutput> n1 = s.schedule_ahead();
  ASSERT_TRUE(n1.has_value());
  ASSERT_EQ(n1->scheduled.size(), 2u);
  ASSERT_EQ(s.update_from_output(n0, std::vector<int32_t>{3, 4}).size(), 2u);
  // Request 1 stops on its first token: step 1's work for it is wasted, its blocks free now.
  ASSERT_NE(s.finish(1, FinishReason::kStop), nullptr);
  s.check_invariants();
  const std::vector<TokenOutput> out = s.update_from_output(*n1, std::vector<int32_t>{8, 9});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].request_id, 2u);
  EXPECT_EQ(out[0].token_id, 9);
  const SchedulerOutput n2 = s.schedule();
  EXPECT_EQ(n2.finished_ids, std::vector<RequestId>{1});
  ASSERT_EQ(n2.scheduled.size(), 1u);
  EXPECT_EQ(n2.scheduled[0].token_ids, std::vector<int32_t>{9});
  s.check_invariants();
}

}  // namespace
}  // namespace s4kv::engine
