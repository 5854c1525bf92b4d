// KvCacheManager: block tables, prefix-cache hits across requests, release on finish and abort,
// a randomized scheduler-like stress test, and the KV memory budget -> blocks arithmetic.
#include "kv/kv_cache_manager.h"

#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <random>

#include "kv/kv_capacity.h"

namespace s4kv::kv {
namespace {

constexpr int kBlock = 4;
constexpr uint64_t kSalt = 0x5eed;

std::vector<int32_t> iota_tokens(int n, int32_t start = 0) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), start);
  return t;
}

// Admits a request the way the scheduler does: prefix lookup, allocation of the rest of the
// prompt, then (after the "step") caching of the prompt's full blocks.
ComputedBlocks admit(KvCacheManager& m, RequestId id, const std::vector<int32_t>& prompt) {
  ComputedBlocks computed = m.get_computed_blocks(prompt);
  const int64_t num_new = static_cast<int64_t>(prompt.size()) - computed.num_computed_tokens;
  EXPECT_TRUE(m.allocate_slots(id, num_new, computed));
  m.check_invariants();
  m.cache_blocks(id, prompt, static_cast<int64_t>(prompt.size()));
  m.check_invariants();
  return computed;
}

TEST(KvCacheManager, AllocatesBlocksAsTokensGrow) {
  KvCacheManager m(8, kBlock, true, kSalt);
  ASSERT_TRUE(m.allocate_slots(1, 5));
  m.check_invariants();
  EXPECT_EQ(m.block_table(1).size(), 2u);
  EXPECT_EQ(m.num_tokens(1), 5);
  ASSERT_TRUE(m.allocate_slots(1, 3));  // 8 tokens: still two blocks
  EXPECT_EQ(m.block_table(1).size(), 2u);
  ASSERT_TRUE(m.allocate_slots(1, 1));  // the 9th token opens a third
  m.check_invariants();
  EXPECT_EQ(m.block_table(1).size(), 3u);
  EXPECT_EQ(m.pool().num_free_blocks(), 5);
}

TEST(KvCacheManager, AllocateSlotsIsAllOrNothing) {
  KvCacheManager m(3, kBlock, true, kSalt);
  ASSERT_TRUE(m.allocate_slots(1, 8));
  EXPECT_FALSE(m.allocate_slots(2, 8));
  EXPECT_FALSE(m.has_request(2));
  EXPECT_FALSE(m.allocate_slots(1, 5));
  EXPECT_EQ(m.num_tokens(1), 8);  // unchanged by the failure
  m.check_invariants();
  EXPECT_EQ(m.pool().num_free_blocks(), 1);
}

TEST(KvCacheManager, CacheHitAfterRequestFinishes) {
  KvCacheManager m(16, kBlock, true, kSalt);
  const std::vector<int32_t> prompt = iota_tokens(10);  // two full blocks + 2 tokens
  admit(m, 1, prompt);
  const std::vector<BlockId> first(m.block_table(1).begin(), m.block_table(1).end());
  m.free(1);
  m.check_invariants();
  EXPECT_EQ(m.pool().num_free_blocks(), 16);

  const ComputedBlocks hit = admit(m, 2, prompt);
  EXPECT_EQ(hit.num_computed_tokens, 8);
  EXPECT_EQ(hit.blocks, (std::vector<BlockId>{first[0], first[1]}));
  EXPECT_EQ(m.block_table(2)[0], first[0]);
  EXPECT_EQ(m.pool().prefix_cache_queries(), 20);
  EXPECT_EQ(m.pool().prefix_cache_hits(), 8);
}

TEST(KvCacheManager, NeverCachesTheWholePrompt) {
  KvCacheManager m(16, kBlock, true, kSalt);
  const std::vector<int32_t> prompt = iota_tokens(8);  // exactly two blocks
  admit(m, 1, prompt);
  // Both blocks are cached, but the last token must be recomputed: only one block is a hit.
  EXPECT_EQ(m.get_computed_blocks(prompt).num_computed_tokens, 4);
  EXPECT_EQ(m.get_computed_blocks(iota_tokens(9)).num_computed_tokens, 8);
  EXPECT_EQ(m.get_computed_blocks({}).num_computed_tokens, 0);
}

TEST(KvCacheManager, SharedPrefixRefCounts) {
  KvCacheManager m(16, kBlock, true, kSalt);
  std::vector<int32_t> a = iota_tokens(10);
  std::vector<int32_t> b = iota_tokens(10);
  b[9] = 500;  // same first two blocks, different tail
  admit(m, 1, a);
  const ComputedBlocks hit = admit(m, 2, b);
  ASSERT_EQ(hit.blocks.size(), 2u);
  EXPECT_EQ(m.pool().ref_count(hit.blocks[0]), 2);
  EXPECT_NE(m.block_table(1)[2], m.block_table(2)[2]);
  m.free(1);  // the other request keeps the shared prefix
  m.check_invariants();
  EXPECT_EQ(m.pool().ref_count(hit.blocks[0]), 1);
  EXPECT_EQ(m.pool().num_free_blocks(), 13);
  m.free(2);
  m.check_invariants();
  EXPECT_EQ(m.pool().num_free_blocks(), 16);
}

TEST(KvCacheManager, DecodeFillsAndCachesNewBlocks) {
  KvCacheManager m(16, kBlock, true, kSalt);
  std::vector<int32_t> tokens = iota_tokens(6);
  admit(m, 1, tokens);
  for (int32_t t = 100; t < 106; ++t) {  // decode one token per step
    tokens.push_back(t);
    ASSERT_TRUE(m.allocate_slots(1, 1));
    m.cache_blocks(1, tokens, static_cast<int64_t>(tokens.size()));
    m.check_invariants();
  }
  // 12 tokens: three full blocks, all cached; a continuation finds them.
  std::vector<int32_t> follow_up = tokens;
  follow_up.push_back(7);
  EXPECT_EQ(m.get_computed_blocks(follow_up).num_computed_tokens, 12);
}

TEST(KvCacheManager, UncomputedTokensAreNotCached) {
  KvCacheManager m(16, kBlock, true, kSalt);
  const std::vector<int32_t> prompt = iota_tokens(13);
  ASSERT_TRUE(m.allocate_slots(1, 13));
  m.cache_blocks(1, prompt, 6);  // a chunked prefill computed 6 tokens so far
  EXPECT_EQ(m.get_computed_blocks(prompt).num_computed_tokens, 4);
  m.cache_blocks(1, prompt, 13);
  EXPECT_EQ(m.get_computed_blocks(prompt).num_computed_tokens, 12);
  m.check_invariants();
}

TEST(KvCacheManager, EvictedBlocksMissAfterReallocation) {
  KvCacheManager m(4, kBlock, true, kSalt);
  const std::vector<int32_t> prompt = iota_tokens(9);
  admit(m, 1, prompt);  // 3 blocks, 2 cached
  m.free(1);
  ASSERT_TRUE(m.allocate_slots(2, 16));  // needs all 4 blocks: evicts every cached one
  m.check_invariants();
  m.free(2);
  EXPECT_EQ(m.get_computed_blocks(prompt).num_computed_tokens, 0);
}

TEST(KvCacheManager, HitOnFreeBlocksCountsThemAgainstFreeSpace) {
  KvCacheManager m(3, kBlock, true, kSalt);
  const std::vector<int32_t> prompt = iota_tokens(9);
  admit(m, 1, prompt);
  m.free(1);
  // Cached blocks 0-1 sit in the free list. A hit on both plus two new blocks needs 4 > 3.
  ComputedBlocks hit = m.get_computed_blocks(prompt);
  ASSERT_EQ(hit.blocks.size(), 2u);
  EXPECT_FALSE(m.allocate_slots(2, 1 + 4, hit));
  m.check_invariants();
  EXPECT_TRUE(m.allocate_slots(2, 1, hit));
  m.check_invariants();
  EXPECT_EQ(m.pool().num_free_blocks(), 0);
}

TEST(KvCacheManager, AbortMidPrefillFreesEverything) {
  KvCacheManager m(8, kBlock, true, kSalt);
  const std::vector<int32_t> prompt = iota_tokens(20);
  ASSERT_TRUE(m.allocate_slots(1, 8));  // first chunk of a chunked prefill
  m.cache_blocks(1, prompt, 8);
  ASSERT_TRUE(m.allocate_slots(1, 8));
  m.free(1);  // abort
  m.check_invariants();
  EXPECT_FALSE(m.has_request(1));
  EXPECT_EQ(m.pool().num_free_blocks(), 8);
  m.free(1);  // a second abort, or one for a request never scheduled, is harmless
  m.free(99);
  m.check_invariants();
}

TEST(KvCacheManager, FreeReleasesTailFirst) {
  KvCacheManager m(8, kBlock, true, kSalt);
  ASSERT_TRUE(m.allocate_slots(1, 12));
  const std::vector<BlockId> table(m.block_table(1).begin(), m.block_table(1).end());
  m.free(1);
  const std::vector<BlockId> free_list = m.pool().free_list();
  const std::vector<BlockId> tail(free_list.end() - 3, free_list.end());
  EXPECT_EQ(tail, (std::vector<BlockId>{table[2], table[1], table[0]}));
}

TEST(KvCacheManager, PrefixCachingOff) {
  KvCacheManager m(8, kBlock, false, kSalt);
  const std::vector<int32_t> prompt = iota_tokens(9);
  admit(m, 1, prompt);
  m.free(1);
  EXPECT_EQ(m.get_computed_blocks(prompt).num_computed_tokens, 0);
  EXPECT_EQ(m.pool().prefix_cache_queries(), 0);
}

// Requests drawn from a few shared prefixes are admitted, decoded, finished or aborted at
// random; invariants (including ref count == number of tables holding a block) after each step.
// Runs with and without a sink pool (int4_kivi v2: every table's first block from it).
class KvCacheManagerStress : public ::testing::TestWithParam<int> {};

// The parameter: sink blocks (ones digit), with 10 added 4 seats of 2 blocks each, with 100
// added the sink blocks as runs of 2 main-pool blocks.
TEST_P(KvCacheManagerStress, RandomizedSchedulerStress) {
  const int num_sink = GetParam() % 10, num_seats = GetParam() % 100 >= 10 ? 4 : 0;
  const int sink_run = GetParam() >= 100 ? 2 : 0;
  KvCacheManager m(24, kBlock, true, kSalt, num_sink, num_seats, num_seats > 0 ? 2 : 0, sink_run);
  std::mt19937 rng(7);
  std::vector<std::vector<int32_t>> prefixes;
  for (int p = 0; p < 4; ++p) prefixes.push_back(iota_tokens(12, 1000 * p));
  std::map<RequestId, std::vector<int32_t>> running;
  RequestId next_id = 1;
  for (int step = 0; step < 5000; ++step) {
    const int op = static_cast<int>(rng() % 4);
    if (op == 0) {
      std::vector<int32_t> prompt = prefixes[rng() % prefixes.size()];
      prompt.resize(1 + rng() % prompt.size());
      for (unsigned i = rng() % 9; i > 0; --i) prompt.push_back(static_cast<int32_t>(rng() % 50));
      ComputedBlocks c = m.get_computed_blocks(prompt);
      const int64_t num_new = static_cast<int64_t>(prompt.size()) - c.num_computed_tokens;
      ASSERT_GE(num_new, 1);
      if (m.allocate_slots(next_id, num_new, c)) {
        if (num_sink > 0) {
          EXPECT_GE(m.block_table(next_id)[0], 24);  // the first block is a sink block
          for (size_t i = 1; i < m.block_table(next_id).size(); ++i) {
            EXPECT_LT(m.block_table(next_id)[i], 24);
          }
        }
        m.cache_blocks(next_id, prompt, static_cast<int64_t>(prompt.size()));
        running[next_id] = prompt;
        if (num_seats > 0) {
          EXPECT_LE(static_cast<int>(running.size()), num_seats);
        }
      }
      ++next_id;
    } else if (op <= 2 && !running.empty()) {  // decode a token, or preempt when full
      auto it = std::next(running.begin(), static_cast<long>(rng() % running.size()));
      if (m.allocate_slots(it->first, 1)) {
        it->second.push_back(static_cast<int32_t>(rng() % 50));
        m.cache_blocks(it->first, it->second, static_cast<int64_t>(it->second.size()));
      } else {
        m.free(it->first);
        running.erase(it);
      }
    } else if (op == 3 && !running.empty()) {  // finish or abort
      auto it = std::next(running.begin(), static_cast<long>(rng() % running.size()));
      m.free(it->first);
      running.erase(it);
    }
    m.check_invariants();
  }
  EXPECT_GT(m.pool().prefix_cache_hits(), 0);
  for (const auto& [id, tokens] : running) m.free(id);
  m.check_invariants();
  EXPECT_EQ(m.num_requests(), 0);
  // Every block is free or, with sink runs, in the run of a sink still cached.
  EXPECT_EQ(m.num_available_blocks(), 24 - sink_run);  // but the dummy block's sink run
  if (sink_run == 0) {
    EXPECT_EQ(m.pool().num_free_blocks(), 24);
  }
  if (num_sink > 0) {
    EXPECT_EQ(m.sink_pool()->num_free_blocks(), num_sink);
  }
  EXPECT_EQ(m.num_free_seats(), num_seats);
}

INSTANTIATE_TEST_SUITE_P(SinkPool, KvCacheManagerStress, ::testing::Values(0, 3, 10, 13, 103, 113));

// int4_kivi v2: the first block of every table comes from the sink pool (ids after the main
// pool's), is cached and shared like any block, and the sink pool's size bounds admissions.
TEST(KvCacheManager, SinkPoolSuppliesEveryFirstBlock) {
  KvCacheManager m(8, kBlock, true, kSalt, /*num_sink_blocks=*/2);
  ASSERT_EQ(m.sink_pool()->num_blocks(), 2);
  const std::vector<int32_t> a = iota_tokens(10);  // three blocks: sink + 2 main
  admit(m, 1, a);
  ASSERT_EQ(m.block_table(1).size(), 3u);
  EXPECT_GE(m.block_table(1)[0], 8);
  EXPECT_LT(m.block_table(1)[0], 10);
  EXPECT_LT(m.block_table(1)[1], 8);
  EXPECT_EQ(m.pool().num_free_blocks(), 6);
  EXPECT_EQ(m.sink_pool()->num_free_blocks(), 1);

  // Same first two blocks: the sink block and the next are shared.
  std::vector<int32_t> b = a;
  b[9] = 77;
  const ComputedBlocks hit = admit(m, 2, b);
  ASSERT_EQ(hit.blocks.size(), 2u);
  EXPECT_EQ(hit.blocks[0], m.block_table(1)[0]);
  EXPECT_EQ(m.sink_pool()->ref_count(m.block_table(1)[0] - 8), 2);
  EXPECT_EQ(m.sink_pool()->num_free_blocks(), 1);

  // A different prompt takes the last sink block; a third one finds none and changes nothing.
  admit(m, 3, iota_tokens(3, 100));
  EXPECT_EQ(m.sink_pool()->num_free_blocks(), 0);
  EXPECT_FALSE(m.allocate_slots(4, 3));
  EXPECT_FALSE(m.has_request(4));
  EXPECT_EQ(m.pool().num_free_blocks(), 5);
  m.check_invariants();

  // Once every holder is gone the sink block stays cached until reallocated.
  const BlockId sink_a = m.block_table(1)[0];
  m.free(1);
  m.free(2);
  m.check_invariants();
  EXPECT_EQ(m.sink_pool()->num_free_blocks(), 1);
  const ComputedBlocks again = m.get_computed_blocks(a);
  ASSERT_EQ(again.blocks.size(), 2u);
  EXPECT_EQ(again.blocks[0], sink_a);
  ASSERT_TRUE(m.allocate_slots(5, 3));  // a cold request evicts it
  m.check_invariants();
  EXPECT_EQ(m.block_table(5)[0], sink_a);
  EXPECT_TRUE(m.get_computed_blocks(a).blocks.empty());
}

// Seats with blocks (int4_kivi's residual rings): each request holds the lowest seat whose run
// is free, the runs sit at the top of the pool, requests use those blocks only when nothing else
// is free, and a seat whose run holds a request's block (or a prefix hit) is passed over.
TEST(KvCacheManager, SeatsHoldTheirRunsOfBlocks) {
  // 12 blocks of 4 tokens; 3 seats of 2 blocks: runs 6-7, 8-9, 10-11.
  KvCacheManager m(12, kBlock, true, kSalt, /*num_sink_blocks=*/0, /*num_seats=*/3,
                   /*blocks_per_seat=*/2);
  EXPECT_EQ(m.seat_block(0), 6);
  EXPECT_EQ(m.pool().last_resort_from(), 6);
  admit(m, 1, iota_tokens(8));  // 2 blocks
  EXPECT_EQ(m.seat(1), 0);
  EXPECT_EQ(m.block_table(1)[0], 0);
  EXPECT_EQ(m.pool().ref_count(6), 1);
  EXPECT_EQ(m.pool().ref_count(7), 1);
  EXPECT_EQ(m.pool().num_free_blocks(), 8);
  EXPECT_EQ(m.num_free_seats(), 2);

  // A request of 6 blocks takes seat 1's run 8-9, blocks 2..5, then seat 2's idle run (the last
  // resort): 10, 11.
  admit(m, 2, iota_tokens(24, 100));
  EXPECT_EQ(m.seat(2), 1);  // seat 1's run 8-9 was free when it was admitted
  const std::vector<BlockId> t2(m.block_table(2).begin(), m.block_table(2).end());
  EXPECT_EQ(t2, (std::vector<BlockId>{2, 3, 4, 5, 10, 11}));
  EXPECT_EQ(m.pool().num_free_blocks(), 0);

  // No free seat run (seat 2's run is request 2's): a third request waits, nothing changes.
  EXPECT_FALSE(m.allocate_slots(3, 1));
  EXPECT_FALSE(m.has_request(3));
  m.check_invariants();

  // Request 1 finishes: its seat's run and blocks are free; the next request takes seat 0.
  m.free(1);
  m.check_invariants();
  EXPECT_EQ(m.num_free_seats(), 2);
  EXPECT_EQ(m.pool().num_free_blocks(), 4);
  ASSERT_TRUE(m.allocate_slots(3, 4));
  EXPECT_EQ(m.seat(3), 0);
  EXPECT_EQ(m.block_table(3)[0], 1);  // the ordinary blocks first (0 and 1 were freed last-first)
  m.check_invariants();
  m.free(2);
  m.free(3);
  m.check_invariants();
  EXPECT_EQ(m.num_free_seats(), 3);
  EXPECT_EQ(m.pool().num_free_blocks(), 12);
}

// Sink runs: each sink block's 16-bit bytes are a run of main-pool blocks, held while the sink
// is in use or cached, lent to block tables while it is empty, and given back to the main pool
// (forgetting the cached sink) when the main pool runs short.
TEST(KvCacheManager, SinkRunsLiveInTheMainPool) {
  // 12 blocks of 4 tokens; 2 sink blocks as runs of 2: sink 0 at 6-7, sink 1 at 8-9, the dummy
  // block's at 10-11 (never handed out); ordinary blocks 0-5; no seats.
  KvCacheManager m(12, kBlock, true, kSalt, /*num_sink_blocks=*/2, 0, 0, /*sink_run_blocks=*/2);
  EXPECT_EQ(m.sink_block(0), 6);
  EXPECT_EQ(m.sink_block(1), 8);
  EXPECT_EQ(m.sink_block(2), 10);
  EXPECT_EQ(m.pool().last_resort_from(), 6);
  EXPECT_EQ(m.pool().ref_count(10), 1);
  EXPECT_EQ(m.num_available_blocks(), 10);

  // A request of 3 blocks: sink 0 (its run 6-7 taken) and blocks 0, 1.
  const std::vector<int32_t> a = iota_tokens(12);
  admit(m, 1, a);
  EXPECT_EQ(m.block_table(1)[0], 12);  // sink 0's table id: num_blocks + 0
  EXPECT_EQ(m.pool().ref_count(6), 1);
  EXPECT_EQ(m.pool().ref_count(7), 1);
  EXPECT_EQ(m.pool().num_free_blocks(), 6);  // 2-5 and sink 1's run 8-9

  // Finished, its sink stays cached and keeps its run; the blocks after it are free.
  m.free(1);
  m.check_invariants();
  EXPECT_EQ(m.pool().num_free_blocks(), 8);
  EXPECT_EQ(m.num_available_blocks(), 10);  // sink 0's run can be had back
  ASSERT_EQ(m.get_computed_blocks(a).blocks.size(), 2u);

  // A request that needs 7 main blocks after its sink: sink 1 (empty, its run free: taken), then
  // blocks 0-5 and, short of one, sink 0's run given back (the cached sink forgotten).
  ASSERT_TRUE(m.allocate_slots(2, 32));
  m.check_invariants();
  EXPECT_EQ(m.block_table(2)[0], 13);
  EXPECT_EQ(m.pool().num_free_blocks(), 1);  // one block of sink 0's run left over
  EXPECT_FALSE(m.sink_pool()->block_hash(0).has_value());
  EXPECT_TRUE(m.get_computed_blocks(a).blocks.empty());
  // Sink 0 is empty but its run is lent out: a new request finds no sink and changes nothing.
  EXPECT_FALSE(m.allocate_slots(3, 1));
  EXPECT_FALSE(m.has_request(3));
  m.check_invariants();
  m.free(2);
  m.check_invariants();
  EXPECT_EQ(m.num_available_blocks(), 10);
  EXPECT_EQ(m.sink_pool()->num_free_blocks(), 2);
}

TEST(KvCacheManager, SeatRunsSkipPrefixHits) {
  // 12 blocks; 3 seats of 1 block: runs 9, 10, 11. A cached block lands in seat 0's run; a
  // request hitting it must not take seat 0 (which would evict its own hit): it takes seat 1.
  KvCacheManager m(12, kBlock, true, kSalt, 0, /*num_seats=*/3, /*blocks_per_seat=*/1);
  admit(m, 1, iota_tokens(4));        // seat 0 (run 9), block 0
  admit(m, 2, iota_tokens(20, 100));  // seat 1 (run 10), blocks 1-5
  admit(m, 3, iota_tokens(12, 200));  // seat 2 (run 11), blocks 6-8: no ordinary block left
  m.free(1);                          // seat 0 and its run 9 are free, block 0 too
  std::vector<int32_t> b = iota_tokens(28, 100);
  ASSERT_TRUE(m.allocate_slots(2, 8));  // blocks 0, then 9 (the last resort)
  m.cache_blocks(2, b, 28);
  EXPECT_EQ(m.block_table(2)[6], 9);
  m.free(3);
  m.free(2);
  m.check_invariants();

  b.push_back(7);
  const ComputedBlocks hit = m.get_computed_blocks(b);
  ASSERT_EQ(hit.blocks.size(), 7u);
  EXPECT_EQ(hit.blocks[6], 9);
  ASSERT_TRUE(m.allocate_slots(4, 1, hit));
  EXPECT_EQ(m.seat(4), 1);
  EXPECT_EQ(m.block_table(4)[6], 9);
  EXPECT_EQ(m.pool().ref_count(9), 1);
  EXPECT_EQ(m.num_free_seats(), 2);
  m.check_invariants();
}

TEST(KvCapacity, BlocksForBudget) {
  EXPECT_EQ(num_blocks_for_budget(100, 10), 10);
  EXPECT_EQ(num_blocks_for_budget(109, 10), 10);
  EXPECT_EQ(num_blocks_for_budget(9, 10), 0);
}

TEST(KvCapacity, Qwen05BShapeAtDefaults) {
  // 24 layers, 2 KV heads, head_dim 128, B=64, Gv=128: 140 bytes/token/layer/head.
  Result<KvCapacity> c =
      plan_kv_capacity(kDefaultKvCacheMemoryBytes, KvCacheDtype::kInt4Kivi, 24, 2, 128);
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->bytes_per_block, 140 * 64 * 48);
  EXPECT_EQ(c->num_blocks, (int64_t{1} << 30) / (140 * 64 * 48));
  EXPECT_EQ(c->num_tokens, c->num_blocks * 64);
  EXPECT_EQ(c->num_tokens_16bit, (int64_t{1} << 30) / (512 * 64 * 48) * 64);
  EXPECT_NEAR(c->density, 512.0 / 140.0, 1e-12);
  EXPECT_EQ(format_kv_capacity(*c),
            "KV cache: 1.00 GiB int4_kivi, 2496 blocks of 64 tokens (430080 bytes each) = "
            "159744 tokens (16-bit: 43648 tokens), density 3.66x 16-bit");
}

TEST(KvCapacity, SixteenBitDensityIsOne) {
  Result<KvCapacity> c = plan_kv_capacity(1 << 24, KvCacheDtype::k16Bit, 2, 2, 128, 32);
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c->num_tokens, c->num_tokens_16bit);
  EXPECT_DOUBLE_EQ(c->density, 1.0);
}

TEST(KvCapacity, RefusesBudgetBelowOneBlock) {
  Result<KvCapacity> c = plan_kv_capacity(1000, KvCacheDtype::kInt4Kivi, 24, 2, 128);
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("--kv-cache-memory=1000"), std::string::npos);
  EXPECT_FALSE(plan_kv_capacity(0, KvCacheDtype::kInt4Kivi, 24, 2, 128).is_ok());
  EXPECT_FALSE(plan_kv_capacity(-5, KvCacheDtype::kInt4Kivi, 24, 2, 128).is_ok());
}

}  // namespace
}  // namespace s4kv::kv
