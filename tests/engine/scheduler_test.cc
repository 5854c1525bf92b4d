// Scheduler tests on CPU with the fake model of fake_model.h: chunked prefill, mixed batches,
// seats, prefix hits, preemption by recompute (outputs identical to an unpressured run over many
// random request mixes), aborts in every state, refusals. The fake engine checks the scheduler's
// and the pool's invariants after every step, and each test ends with the pool completely free.
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <numeric>
#include <random>
#include <set>

#include "fake_model.h"

namespace s4kv::engine {
namespace {

using testing::FakeEngine;
using testing::reference_outputs;

constexpr int32_t kVocab = 50;
constexpr uint64_t kSalt = 0x5eed;

std::vector<int32_t> iota_tokens(int n, int32_t start = 0) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), start);
  return t;
}

SchedulerConfig config(int64_t budget, int max_num_seqs = 8, int64_t max_model_len = 64) {
  SchedulerConfig c;
  c.max_num_batched_tokens = budget;
  c.max_num_seqs = max_num_seqs;
  c.max_model_len = max_model_len;
  return c;
}

CacheConfig cache(int num_blocks, int block_size = 4, bool prefix_caching = true,
                  int blocks_per_seat = 0) {
  CacheConfig c{num_blocks, block_size, prefix_caching, kSalt};
  c.blocks_per_seat = blocks_per_seat;
  return c;
}

const ScheduledRequest* find(const SchedulerOutput& out, RequestId id) {
  for (const ScheduledRequest& s : out.scheduled) {
    if (s.request_id == id) return &s;
  }
  return nullptr;
}

void expect_reference(const FakeEngine& e, RequestId id, const std::vector<int32_t>& prompt,
                      int max_tokens) {
  EXPECT_EQ(e.outputs.at(id),
            reference_outputs(prompt, max_tokens, e.scheduler.config().max_model_len, kVocab))
      << "request " << id;
}

TEST(Scheduler, ChunkedPrefillAcrossSteps) {
  FakeEngine e(config(8), cache(32), kVocab);
  const std::vector<int32_t> prompt = iota_tokens(30);
  e.add(1, prompt, 3);
  for (int64_t start : {0, 8, 16}) {
    ASSERT_TRUE(e.step());
    ASSERT_EQ(e.last.scheduled.size(), 1u);
    EXPECT_EQ(e.last.scheduled[0].num_computed_tokens, start);
    EXPECT_EQ(e.last.scheduled[0].num_scheduled_tokens, 8);
    EXPECT_FALSE(e.last.scheduled[0].samples);  // a partial chunk samples nothing
    EXPECT_TRUE(e.outputs[1].empty());
  }
  ASSERT_TRUE(e.step());
  EXPECT_EQ(e.last.scheduled[0].num_scheduled_tokens, 6);
  EXPECT_TRUE(e.last.scheduled[0].samples);
  EXPECT_EQ(e.outputs[1].size(), 1u);
  ASSERT_TRUE(e.step());  // decode: one token
  EXPECT_EQ(e.last.scheduled[0].num_computed_tokens, 30);
  EXPECT_EQ(e.last.scheduled[0].num_scheduled_tokens, 1);
  e.run();
  expect_reference(e, 1, prompt, 3);
  e.expect_all_free();
}

TEST(Scheduler, MixedPrefillAndDecodeInOneStep) {
  FakeEngine e(config(10), cache(32), kVocab);
  e.add(1, iota_tokens(5), 10);
  ASSERT_TRUE(e.step());  // request 1 prefills and samples
  e.add(2, iota_tokens(20, 100), 2);
  ASSERT_TRUE(e.step());
  ASSERT_EQ(e.last.scheduled.size(), 2u);
  EXPECT_EQ(e.last.scheduled[0].request_id, 1u);  // running first
  EXPECT_EQ(e.last.scheduled[0].num_scheduled_tokens, 1);
  EXPECT_EQ(e.last.scheduled[1].request_id, 2u);
  EXPECT_TRUE(e.last.scheduled[1].is_new);
  EXPECT_EQ(e.last.scheduled[1].num_scheduled_tokens, 9);  // the rest of the budget
  EXPECT_EQ(e.last.total_num_scheduled_tokens, 10);
  e.run();
  expect_reference(e, 1, iota_tokens(5), 10);
  expect_reference(e, 2, iota_tokens(20, 100), 2);
  e.expect_all_free();
}

TEST(Scheduler, LongPrefillThresholdCapsChunks) {
  SchedulerConfig c = config(64);
  c.long_prefill_token_threshold = 6;
  FakeEngine e(c, cache(32), kVocab);
  e.add(1, iota_tokens(20), 2);
  e.add(2, iota_tokens(3, 7), 2);
  ASSERT_TRUE(e.step());
  ASSERT_EQ(e.last.scheduled.size(), 2u);
  EXPECT_EQ(e.last.scheduled[0].num_scheduled_tokens, 6);
  EXPECT_EQ(e.last.scheduled[1].num_scheduled_tokens, 3);
  e.run();
  expect_reference(e, 1, iota_tokens(20), 2);
  e.expect_all_free();
}

TEST(Scheduler, WithoutChunkedPrefillAPromptWaitsForAWholeStep) {
  SchedulerConfig c = config(16, 8, 16);
  c.enable_chunked_prefill = false;
  FakeEngine e(c, cache(32), kVocab);
  e.add(1, iota_tokens(10), 4);
  e.add(2, iota_tokens(10, 50), 4);
  ASSERT_TRUE(e.step());
  ASSERT_EQ(e.last.scheduled.size(), 1u);  // 10 + 10 > 16: the second prompt waits whole
  ASSERT_TRUE(e.step());
  ASSERT_EQ(e.last.scheduled.size(), 2u);
  EXPECT_EQ(e.last.scheduled[1].num_scheduled_tokens, 10);
  e.run();
  expect_reference(e, 2, iota_tokens(10, 50), 4);
  e.expect_all_free();
}

TEST(Scheduler, MaxNumSeqsRespected) {
  FakeEngine e(config(64, 2), cache(64), kVocab);
  for (RequestId id = 1; id <= 5; ++id) e.add(id, iota_tokens(6, static_cast<int32_t>(id)), 4);
  while (e.scheduler.has_unfinished_requests()) {
    ASSERT_TRUE(e.step());
    EXPECT_LE(e.last.scheduled.size(), 2u);
    EXPECT_LE(e.scheduler.num_running(), 2);
  }
  for (RequestId id = 1; id <= 5; ++id) {
    expect_reference(e, id, iota_tokens(6, static_cast<int32_t>(id)), 4);
  }
  e.expect_all_free();
}

TEST(Scheduler, PrefixHitSkipsComputation) {
  FakeEngine e(config(64), cache(32), kVocab);
  const std::vector<int32_t> a = iota_tokens(18);
  std::vector<int32_t> b = iota_tokens(16);  // shares four full blocks with a
  b.insert(b.end(), {40, 41, 42});
  e.add(1, a, 3);
  e.run();
  e.add(2, b, 3);
  ASSERT_TRUE(e.step());
  EXPECT_EQ(e.last.scheduled[0].num_computed_tokens, 16);
  EXPECT_EQ(e.last.scheduled[0].num_scheduled_tokens, 3);
  e.run();
  expect_reference(e, 2, b, 3);
  const kv::BlockPool& pool = e.scheduler.kv_cache_manager().pool();
  EXPECT_EQ(pool.prefix_cache_queries(), 18 + 19);
  EXPECT_EQ(pool.prefix_cache_hits(), 16);
  e.expect_all_free();
}

TEST(Scheduler, FullPromptMatchStillComputesOneToken) {
  FakeEngine e(config(64), cache(32), kVocab);
  const std::vector<int32_t> prompt = iota_tokens(16);  // exactly four blocks
  e.add(1, prompt, 2);
  e.run();
  e.add(2, prompt, 2);
  ASSERT_TRUE(e.step());
  const ScheduledRequest& s = e.last.scheduled[0];
  EXPECT_EQ(s.num_computed_tokens, 12);  // the last block holds the token that needs logits
  EXPECT_EQ(s.num_scheduled_tokens, 4);
  EXPECT_TRUE(s.samples);
  e.run();
  EXPECT_EQ(e.outputs[2], e.outputs[1]);
  e.expect_all_free();
}

TEST(Scheduler, ConcurrentRequestsShareCachedBlocks) {
  FakeEngine e(config(64), cache(32), kVocab);
  e.add(1, iota_tokens(12), 6);
  ASSERT_TRUE(e.step());  // request 1's prompt blocks are cached after this step
  e.add(2, iota_tokens(13), 6);
  ASSERT_TRUE(e.step());
  const ScheduledRequest* s = find(e.last, 2);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->num_computed_tokens, 12);
  const kv::KvCacheManager& kv = e.scheduler.kv_cache_manager();
  EXPECT_EQ(kv.pool().ref_count(kv.block_table(1)[0]), 2);
  e.run();
  expect_reference(e, 1, iota_tokens(12), 6);
  expect_reference(e, 2, iota_tokens(13), 6);
  e.expect_all_free();
}

TEST(Scheduler, PreemptsLatestArrivedAndRecomputes) {
  // 16 tokens of context each, 4 blocks each at the end; a pool of 6 holds one and a half.
  FakeEngine e(config(64, 8, 24), cache(6, 4, /*prefix_caching=*/false), kVocab);
  e.add(1, iota_tokens(8), 8);
  e.add(2, iota_tokens(8, 20), 8);
  bool saw_preemption = false;
  while (e.scheduler.has_unfinished_requests()) {
    ASSERT_TRUE(e.step());
    if (!e.last.preempted_ids.empty()) {
      EXPECT_EQ(e.last.preempted_ids, std::vector<RequestId>{2});  // the later arrival
      EXPECT_EQ(find(e.last, 2), nullptr);
      const Request* r = e.scheduler.get_request(2);
      ASSERT_NE(r, nullptr);
      EXPECT_EQ(r->status(), RequestStatus::kPreempted);
      EXPECT_EQ(r->num_computed_tokens(), 0);
      EXPECT_FALSE(r->output_token_ids().empty());  // outputs are kept
      saw_preemption = true;
    }
  }
  EXPECT_TRUE(saw_preemption);
  EXPECT_GE(e.scheduler.num_preemptions_total(), 1);
  expect_reference(e, 1, iota_tokens(8), 8);
  expect_reference(e, 2, iota_tokens(8, 20), 8);
  e.expect_all_free();
}

TEST(Scheduler, FinishesAtMaxModelLen) {
  FakeEngine e(config(64, 8, 12), cache(8), kVocab);
  e.add(1, iota_tokens(10), 100);
  e.add(2, iota_tokens(12, 30), 100);  // a prompt of exactly max_model_len samples one token
  e.run();
  EXPECT_EQ(e.outputs[1].size(), 2u);
  EXPECT_EQ(e.outputs[2].size(), 1u);
  EXPECT_EQ(e.finish_reasons[1], FinishReason::kLength);
  expect_reference(e, 1, iota_tokens(10), 100);
  e.expect_all_free();
}

TEST(Scheduler, RefusesImpossibleRequests) {
  Scheduler s(config(16, 4, 32), cache(8));
  EXPECT_EQ(s.add_request(1, {}).code(), StatusCode::kInvalidArgument);
  const Status too_long = s.add_request(2, iota_tokens(33));
  EXPECT_EQ(too_long.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_long.message().find("max_model_len=32"), std::string::npos);
  ASSERT_TRUE(s.add_request(3, iota_tokens(32)).is_ok());
  EXPECT_EQ(s.add_request(3, iota_tokens(4)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.num_waiting(), 1);
  s.check_invariants();
}

TEST(Scheduler, RefusesConfigsThatCouldNeverServeARequest) {
  // 8 blocks of 4 tokens cannot hold one 33-token sequence: a lone request would loop forever.
  const Status s = Scheduler::validate(config(16, 4, 33), cache(8));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("max_model_len=33"), std::string::npos) << s.message();
  EXPECT_TRUE(Scheduler::validate(config(16, 4, 32), cache(8)).is_ok());
  SchedulerConfig no_chunk = config(16, 4, 32);
  no_chunk.enable_chunked_prefill = false;
  EXPECT_FALSE(Scheduler::validate(no_chunk, cache(8)).is_ok());
  EXPECT_FALSE(Scheduler::validate(config(16, 0, 32), cache(8)).is_ok());
  EXPECT_FALSE(Scheduler::validate(config(0, 4, 32), cache(8)).is_ok());
}

TEST(Scheduler, FinishAndAbortReportIdsOnce) {
  FakeEngine e(config(64), cache(16), kVocab);
  e.add(1, iota_tokens(5), 10);
  e.add(2, iota_tokens(5, 9), 10);
  ASSERT_TRUE(e.step());
  EXPECT_TRUE(e.scheduler.abort(1));
  EXPECT_FALSE(e.scheduler.abort(1));
  EXPECT_EQ(e.scheduler.finish(1, FinishReason::kStop), nullptr);
  EXPECT_FALSE(e.scheduler.abort(99));
  ASSERT_TRUE(e.step());
  EXPECT_EQ(e.last.finished_ids, std::vector<RequestId>{1});
  ASSERT_TRUE(e.step());
  EXPECT_TRUE(e.last.finished_ids.empty());
  EXPECT_TRUE(e.scheduler.abort(2));
  e.expect_all_free();
}

TEST(Scheduler, AbortBetweenScheduleAndUpdate) {
  FakeEngine e(config(4), cache(16), kVocab);
  e.add(1, iota_tokens(10), 5);
  e.add(2, iota_tokens(3, 20), 5);
  ASSERT_TRUE(e.step([&] { EXPECT_TRUE(e.scheduler.abort(1)); }));  // mid-prefill, in flight
  EXPECT_EQ(e.scheduler.get_request(1), nullptr);
  e.run();
  expect_reference(e, 2, iota_tokens(3, 20), 5);
  e.expect_all_free();
}

// ---- randomized: many request mixes, fixed seeds ----

struct MixRequest {
  RequestId id;
  std::vector<int32_t> prompt;
  int max_tokens;
  int arrival_step;
};

struct Mix {
  SchedulerConfig config;
  int block_size;
  bool prefix_caching;
  std::vector<MixRequest> requests;
  int blocks_per_seat = 0;  // int4_kivi's rings: each running request's seat holds some blocks
};

Mix random_mix(std::mt19937& rng) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  Mix m;
  m.block_size = std::vector<int>{2, 4, 8}[static_cast<size_t>(pick(0, 2))];
  m.prefix_caching = pick(0, 3) != 0;
  m.config.max_model_len = pick(24, 48);
  m.config.max_num_seqs = pick(1, 6);
  m.config.max_num_batched_tokens = std::vector<int>{1, 3, 8, 16, 64}[size_t(pick(0, 4))];
  m.config.long_prefill_token_threshold = pick(0, 2) == 0 ? pick(1, 8) : 0;
  m.blocks_per_seat = pick(0, 2);
  // Two shared stems so that prompts hit each other's cached blocks.
  std::vector<std::vector<int32_t>> stems(2);
  for (auto& stem : stems) {
    for (int i = 0; i < 24; ++i) stem.push_back(pick(0, kVocab - 1));
  }
  int arrival = 0;
  const int n = pick(1, 10);
  for (int i = 0; i < n; ++i) {
    MixRequest r{static_cast<RequestId>(i + 1), {}, pick(1, 16), arrival += pick(0, 3)};
    const int len = pick(1, static_cast<int>(m.config.max_model_len));
    const int shared = pick(0, 1) == 0 ? std::min(len, pick(0, 24)) : 0;
    const auto& stem = stems[static_cast<size_t>(pick(0, 1))];
    r.prompt.assign(stem.begin(), stem.begin() + shared);
    while (static_cast<int>(r.prompt.size()) < len) r.prompt.push_back(pick(0, kVocab - 1));
    m.requests.push_back(std::move(r));
  }
  return m;
}

struct MixStats {
  int64_t num_preemptions = 0;
  int64_t prefix_hit_tokens = 0;
};

// Runs a mix; `on_step(engine, step)` may abort requests. Returns every request's outputs.
template <typename OnStep>
std::map<RequestId, std::vector<int32_t>> run_mix(const Mix& m, int num_blocks, OnStep on_step,
                                                  MixStats* stats = nullptr) {
  FakeEngine e(m.config, cache(num_blocks, m.block_size, m.prefix_caching, m.blocks_per_seat),
               kVocab);
  size_t next = 0;
  for (int step = 0; next < m.requests.size() || e.scheduler.has_unfinished_requests(); ++step) {
    EXPECT_LT(step, 100000) << "no progress";
    if (step >= 100000) break;
    for (; next < m.requests.size() && m.requests[next].arrival_step <= step; ++next) {
      e.add(m.requests[next].id, m.requests[next].prompt, m.requests[next].max_tokens);
    }
    on_step(e, step);
    const bool scheduled = e.step();
    EXPECT_TRUE(scheduled || !e.scheduler.has_unfinished_requests());
    if (::testing::Test::HasFailure()) break;
  }
  e.expect_all_free();
  if (stats != nullptr) {
    stats->num_preemptions += e.scheduler.num_preemptions_total();
    stats->prefix_hit_tokens += e.scheduler.kv_cache_manager().pool().prefix_cache_hits();
  }
  return e.outputs;
}

// The fewest blocks validate() accepts (one max_model_len request and its seat's blocks, and
// every seat's blocks), plus 0..3.
int tiny_pool(const Mix& m, std::mt19937& rng) {
  const int min_blocks =
      static_cast<int>((m.config.max_model_len + m.block_size - 1) / m.block_size) +
      m.blocks_per_seat;
  return std::max(min_blocks, m.config.max_num_seqs * m.blocks_per_seat) +
         std::uniform_int_distribution<int>(0, 3)(rng);
}

TEST(SchedulerRandomized, OutputsUnchangedUnderMemoryPressure) {
  MixStats stats;
  for (uint32_t seed = 0; seed < 300; ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    std::mt19937 rng(seed);
    const Mix m = random_mix(rng);
    auto no_op = [](FakeEngine&, int) {};
    const auto tiny = run_mix(m, tiny_pool(m, rng), no_op, &stats);
    const auto huge = run_mix(m, 4096, no_op);
    EXPECT_EQ(tiny, huge);
    for (const MixRequest& r : m.requests) {
      EXPECT_EQ(tiny.at(r.id),
                reference_outputs(r.prompt, r.max_tokens, m.config.max_model_len, kVocab));
    }
    if (::testing::Test::HasFailure()) break;
  }
  // The mixes did exercise preemption and prefix hits.
  EXPECT_GT(stats.num_preemptions, 100);
  EXPECT_GT(stats.prefix_hit_tokens, 1000);
  std::cout << "preemptions " << stats.num_preemptions << ", prefix-hit tokens "
            << stats.prefix_hit_tokens << "\n";
}

// The state a request is in when the test aborts it.
enum AbortedIn { kWaitingState, kMidPrefill, kDecoding, kPreemptedState };

AbortedIn state_of(const Request& r) {
  if (r.status() == RequestStatus::kWaiting) return kWaitingState;
  if (r.status() == RequestStatus::kPreempted) return kPreemptedState;
  return r.num_output_tokens() == 0 ? kMidPrefill : kDecoding;
}

TEST(SchedulerRandomized, AbortAtRandomTimesFreesEverything) {
  std::set<AbortedIn> seen;
  for (uint32_t seed = 0; seed < 300; ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    std::mt19937 rng(1000 + seed);
    const Mix m = random_mix(rng);
    std::set<RequestId> aborted;
    auto abort_some = [&](FakeEngine& e, int) {
      const RequestId id = std::uniform_int_distribution<RequestId>(1, m.requests.size())(rng);
      const Request* r = e.scheduler.get_request(id);
      if (r == nullptr || std::uniform_int_distribution<int>(0, 5)(rng) != 0) return;
      seen.insert(state_of(*r));
      EXPECT_TRUE(e.scheduler.abort(id));
      aborted.insert(id);
    };
    const auto outputs = run_mix(m, tiny_pool(m, rng), abort_some);
    // Aborting some requests never changes the outputs of the others.
    for (const MixRequest& r : m.requests) {
      if (aborted.contains(r.id)) continue;
      EXPECT_EQ(outputs.at(r.id),
                reference_outputs(r.prompt, r.max_tokens, m.config.max_model_len, kVocab));
    }
    if (::testing::Test::HasFailure()) break;
  }
  EXPECT_EQ(seen, (std::set<AbortedIn>{kWaitingState, kMidPrefill, kDecoding, kPreemptedState}));
}

}  // namespace
}  // namespace s4kv::engine
