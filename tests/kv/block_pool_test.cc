// BlockPool: LRU free list, all-or-nothing allocation, ref counts, prefix-cache eviction, and a
// randomized stress test against a simple model, with invariants checked after every step.
#include "kv/block_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

namespace s4kv::kv {
namespace {

std::vector<BlockId> take(BlockPool& pool, int n) {
  std::optional<std::vector<BlockId>> got = pool.allocate(n);
  EXPECT_TRUE(got.has_value());
  pool.check_invariants();
  return got.value_or(std::vector<BlockId>{});
}

TEST(BlockPool, StartsAllFreeInIdOrder) {
  BlockPool pool(4, true);
  pool.check_invariants();
  EXPECT_EQ(pool.num_free_blocks(), 4);
  EXPECT_EQ(pool.usage(), 0.0);
  EXPECT_EQ(pool.free_list(), (std::vector<BlockId>{0, 1, 2, 3}));
}

TEST(BlockPool, AllocateIsAllOrNothing) {
  BlockPool pool(4, true);
  const auto a = take(pool, 3);
  EXPECT_EQ(a, (std::vector<BlockId>{0, 1, 2}));
  EXPECT_DOUBLE_EQ(pool.usage(), 0.75);
  EXPECT_FALSE(pool.allocate(2).has_value());
  pool.check_invariants();
  EXPECT_EQ(pool.num_free_blocks(), 1);  // the failed call took nothing
  EXPECT_EQ(take(pool, 0), std::vector<BlockId>{});
  EXPECT_EQ(take(pool, 1), std::vector<BlockId>{3});
  EXPECT_FALSE(pool.allocate(1).has_value());
  EXPECT_DOUBLE_EQ(pool.usage(), 1.0);
}

TEST(BlockPool, FreedBlocksJoinTailInLruOrder) {
  BlockPool pool(5, true);
  const auto a = take(pool, 2);  // 0 1
  const auto b = take(pool, 2);  // 2 3
  // A request frees its blocks last-first, so its tail block is evicted before its prefix.
  pool.free(std::vector<BlockId>{b[1], b[0]});
  pool.check_invariants();
  pool.free(std::vector<BlockId>{a[1], a[0]});
  pool.check_invariants();
  EXPECT_EQ(pool.free_list(), (std::vector<BlockId>{4, 3, 2, 1, 0}));
  EXPECT_EQ(take(pool, 3), (std::vector<BlockId>{4, 3, 2}));
}

TEST(BlockPool, SharedBlocksSurviveOneOwnerFreeing) {
  BlockPool pool(4, true);
  const auto a = take(pool, 2);
  pool.touch(a);  // a second request shares both blocks
  pool.check_invariants();
  EXPECT_EQ(pool.ref_count(a[0]), 2);
  pool.free(a);
  pool.check_invariants();
  EXPECT_EQ(pool.ref_count(a[0]), 1);
  EXPECT_EQ(pool.num_free_blocks(), 2);
  pool.free(a);
  pool.check_invariants();
  EXPECT_EQ(pool.num_free_blocks(), 4);
}

TEST(BlockPool, CachedBlockFindableAfterFreeUntilReallocated) {
  BlockPool pool(3, true);
  const auto a = take(pool, 1);
  EXPECT_TRUE(pool.cache_full_block(a[0], 0xabc));
  pool.check_invariants();
  EXPECT_EQ(pool.lookup(0xabc), a[0]);
  pool.free(a);
  pool.check_invariants();
  EXPECT_EQ(pool.lookup(0xabc), a[0]);  // free, yet still a cache hit
  // A hit revives it: ref count 1, out of the free list.
  pool.touch(a);
  pool.check_invariants();
  EXPECT_EQ(pool.ref_count(a[0]), 1);
  EXPECT_EQ(pool.num_free_blocks(), 2);
  pool.free(a);
  // Reallocation reaches it last (freed most recently) and then evicts its hash.
  EXPECT_EQ(take(pool, 2), (std::vector<BlockId>{1, 2}));
  EXPECT_EQ(pool.lookup(0xabc), a[0]);
  EXPECT_EQ(take(pool, 1), a);
  EXPECT_FALSE(pool.lookup(0xabc).has_value());
  EXPECT_FALSE(pool.block_hash(a[0]).has_value());
}

TEST(BlockPool, DuplicateHashKeepsFirstBlock) {
  BlockPool pool(2, true);
  const auto a = take(pool, 2);
  EXPECT_TRUE(pool.cache_full_block(a[0], 7));
  EXPECT_FALSE(pool.cache_full_block(a[1], 7));
  pool.check_invariants();
  EXPECT_EQ(pool.lookup(7), a[0]);
  EXPECT_FALSE(pool.block_hash(a[1]).has_value());
}

TEST(BlockPool, PrefixCachingOffNeverCaches) {
  BlockPool pool(2, false);
  const auto a = take(pool, 1);
  EXPECT_FALSE(pool.cache_full_block(a[0], 7));
  pool.check_invariants();
  EXPECT_FALSE(pool.lookup(7).has_value());
}

TEST(BlockPool, CountersAccumulateTokens) {
  BlockPool pool(1, true);
  pool.record_prefix_cache_query(100, 64);
  pool.record_prefix_cache_query(10, 0);
  EXPECT_EQ(pool.prefix_cache_queries(), 110);
  EXPECT_EQ(pool.prefix_cache_hits(), 64);
}

// Blocks from last_resort_from on are handed out only when no other block is free, and go back
// to their own list; take() claims given free blocks, all or none.
TEST(BlockPool, LastResortBlocksGoLastAndTakeIsAllOrNothing) {
  BlockPool pool(6, true, /*last_resort_from=*/4);
  EXPECT_EQ(pool.free_list(), (std::vector<BlockId>{0, 1, 2, 3, 4, 5}));
  ASSERT_TRUE(pool.take(std::vector<BlockId>{4, 5}));
  pool.check_invariants();
  EXPECT_EQ(pool.ref_count(4), 1);
  EXPECT_EQ(pool.num_free_blocks(), 4);
  pool.free(std::vector<BlockId>{5, 4});  // back to the last-resort list, behind 0..3
  pool.check_invariants();
  EXPECT_EQ(pool.free_list(), (std::vector<BlockId>{0, 1, 2, 3, 5, 4}));

  const auto a = take(pool, 3);  // 0 1 2
  pool.free(std::vector<BlockId>{a[2], a[1], a[0]});
  // Freed ordinary blocks still go before the last-resort ones.
  EXPECT_EQ(pool.free_list(), (std::vector<BlockId>{3, 2, 1, 0, 5, 4}));
  EXPECT_EQ(take(pool, 5), (std::vector<BlockId>{3, 2, 1, 0, 5}));

  // take() with one block in use changes nothing; a cached free block loses its hash.
  EXPECT_FALSE(pool.take(std::vector<BlockId>{4, 5}));
  EXPECT_EQ(pool.ref_count(4), 0);
  pool.check_invariants();
  ASSERT_TRUE(pool.cache_full_block(5, 0xabc));
  pool.free(std::vector<BlockId>{5});
  ASSERT_EQ(pool.lookup(0xabc), std::optional<BlockId>(5));
  ASSERT_TRUE(pool.take(std::vector<BlockId>{4, 5}));
  EXPECT_FALSE(pool.lookup(0xabc).has_value());
  EXPECT_FALSE(pool.block_hash(5).has_value());
  EXPECT_EQ(pool.num_free_blocks(), 0);
  pool.check_invariants();
}

TEST(BlockPoolDeathTest, DoubleFreeAborts) {
  BlockPool pool(2, true);
  const auto a = take(pool, 1);
  pool.free(a);
  EXPECT_DEATH(pool.free(a), "double free");
}

TEST(BlockPoolDeathTest, CachingFreeBlockAborts) {
  BlockPool pool(2, true);
  EXPECT_DEATH((void)pool.cache_full_block(0, 1), "caching free block");
}

// Random allocate/free/touch/cache/lookup against a model of who holds which block. Every step
// checks the pool's invariants and that ref counts equal the model's; at the end everything is
// released and the pool must be whole again.
TEST(BlockPool, RandomizedStress) {
  constexpr int kNumBlocks = 64;
  BlockPool pool(kNumBlocks, true);
  std::mt19937_64 rng(12345);
  std::vector<std::vector<BlockId>> owners;  // each entry: the blocks one holder references
  std::map<BlockHash, BlockId> expected_cache;
  BlockHash next_hash = 1;
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };

  for (int step = 0; step < 20000; ++step) {
    const int op = static_cast<int>(rng() % 6);
    if (op <= 1) {  // allocate
      const int n = static_cast<int>(rng() % 9);
      const int before = pool.num_free_blocks();
      std::optional<std::vector<BlockId>> got = pool.allocate(n);
      ASSERT_EQ(got.has_value(), n <= before);
      if (got) {
        for (BlockId b : *got)
          std::erase_if(expected_cache, [&](auto& e) { return e.second == b; });
        owners.push_back(*got);
      }
    } else if (op == 2 && !owners.empty()) {  // free a holder, last block first
      const size_t i = pick(owners.size());
      std::vector<BlockId> blocks(owners[i].rbegin(), owners[i].rend());
      pool.free(blocks);
      owners.erase(owners.begin() + static_cast<std::ptrdiff_t>(i));
    } else if (op == 3 && !expected_cache.empty()) {  // prefix hit: lookup + touch
      auto it = expected_cache.begin();
      std::advance(it, pick(expected_cache.size()));
      ASSERT_EQ(pool.lookup(it->first), it->second);
      pool.touch(std::vector<BlockId>{it->second});
      owners.push_back({it->second});
    } else if (op == 4 && !owners.empty()) {  // cache one held, uncached block
      const std::vector<BlockId>& held = owners[pick(owners.size())];
      if (!held.empty()) {
        const BlockId b = held[pick(held.size())];
        if (!pool.block_hash(b).has_value()) {
          ASSERT_TRUE(pool.cache_full_block(b, next_hash));
          expected_cache[next_hash++] = b;
        }
      }
    } else if (op == 5) {  // lookups of live and evicted hashes
      const BlockHash h = 1 + rng() % next_hash;
      const auto it = expected_cache.find(h);
      const std::optional<BlockId> got = pool.lookup(h);
      ASSERT_EQ(got.has_value(), it != expected_cache.end()) << "hash " << h;
      if (got) {
        ASSERT_EQ(*got, it->second);
      }
    }
    pool.check_invariants();
    std::vector<int> refs(kNumBlocks, 0);
    for (const auto& held : owners) {
      for (BlockId b : held) ++refs[static_cast<size_t>(b)];
    }
    for (BlockId b = 0; b < kNumBlocks; ++b) {
      ASSERT_EQ(pool.ref_count(b), refs[static_cast<size_t>(b)]);
    }
  }
  for (const auto& held : owners) pool.free(held);
  pool.check_invariants();
  EXPECT_EQ(pool.num_free_blocks(), kNumBlocks);
  EXPECT_EQ(pool.usage(), 0.0);
}

}  // namespace
}  // namespace s4kv::kv
