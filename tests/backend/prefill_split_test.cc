// The split of prefill tiles over their contexts (prefill_attention.cuh: split_prefill), host
// code that needs no device: on random batches, the split tiles still cover every row of the
// plan once (by their first parts), a split tile's parts are consecutive entries 0..parts-1 with
// consecutive slots below kPrefillSplitSlots and one merge naming them, every part has at least
// kPrefillMinRunTiles KV tiles of its context, the split only happens where the tiles' thread
// blocks fill at most half the wave and then stays within about one wave.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/prefill_attention.cuh"
#include "backend/forward_batch_builder.h"
#include "random_batch.h"

namespace s4kv::backend::cuda {
namespace {

TEST(PrefillSplit, PartsCoverTheTilesRowsOnceWithinTheWave) {
  std::mt19937 rng(17);
  int64_t split_batches = 0, unsplit_batches = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int64_t B = 16 << (trial % 4);
    const int num_seqs = std::uniform_int_distribution<int>(1, 4)(rng);
    ForwardBatchBuilder builder = random_prefill_rows(rng, B, num_seqs, 16000, 2, 200, 4);
    const ForwardBatch b = builder.batch();
    const int heads = trial % 3 == 0 ? 28 : trial % 3 == 1 ? 32 : 4;
    const int64_t wave = int64_t{132} * (1 + trial % 3);
    std::vector<PrefillTile> plan;
    plan_prefill(b, 2, plan);
    std::vector<PrefillTile> tiles = plan;
    std::vector<PrefillMerge> merges;
    split_prefill(b, heads, wave, tiles, merges);
    SCOPED_TRACE(testing::Message() << "trial " << trial << ", " << plan.size() << " tiles, "
                                    << heads << " heads, wave " << wave);
    if (2 * static_cast<int64_t>(plan.size()) * heads > wave) {
      ASSERT_TRUE(merges.empty()) << "split where the tiles fill more than half the wave";
      ASSERT_EQ(tiles.size(), plan.size());
    }
    (merges.empty() ? unsplit_batches : split_batches) += 1;
    // The first parts (and the unsplit tiles), in order, are the plan's tiles.
    std::vector<PrefillTile> firsts;
    for (const PrefillTile& t : tiles) {
      if (t.part == 0) firsts.push_back(t);
    }
    ASSERT_EQ(firsts.size(), plan.size());
    for (size_t i = 0; i < plan.size(); ++i) {
      ASSERT_EQ(firsts[i].seq, plan[i].seq);
      ASSERT_EQ(firsts[i].q_begin, plan[i].q_begin);
      ASSERT_EQ(firsts[i].q_end, plan[i].q_end);
    }
    // A split tile: parts consecutive entries, consecutive slots, one merge.
    size_t m = 0;
    int32_t next_slot = 0;
    for (size_t i = 0; i < tiles.size();) {
      const PrefillTile& t = tiles[i];
      if (t.parts == 1) {
        ASSERT_EQ(t.part, 0);
        ASSERT_EQ(t.slot, -1);
        ++i;
        continue;
      }
      ASSERT_GE(t.parts, 2);
      ASSERT_LT(m, merges.size());
      const PrefillMerge& mg = merges[m++];
      ASSERT_EQ(mg.q_begin, t.q_begin);
      ASSERT_EQ(mg.q_end, t.q_end);
      ASSERT_EQ(mg.parts, t.parts);
      ASSERT_EQ(mg.first_slot, next_slot);
      const int64_t context = b.seq_lens[t.seq] - (b.query_start_loc[t.seq + 1] - t.q_end);
      ASSERT_GE((context + 63) / 64, int64_t{kPrefillMinRunTiles} * t.parts)
          << "a part of fewer than kPrefillMinRunTiles KV tiles";
      for (int32_t j = 0; j < t.parts; ++j) {
        ASSERT_LT(i + static_cast<size_t>(j), tiles.size());
        const PrefillTile& p = tiles[i + static_cast<size_t>(j)];
        ASSERT_EQ(p.seq, t.seq);
        ASSERT_EQ(p.q_begin, t.q_begin);
        ASSERT_EQ(p.q_end, t.q_end);
        ASSERT_EQ(p.parts, t.parts);
        ASSERT_EQ(p.part, j);
        ASSERT_EQ(p.slot, next_slot + j);
      }
      next_slot += t.parts;
      i += static_cast<size_t>(t.parts);
    }
    ASSERT_EQ(m, merges.size());
    ASSERT_LE(next_slot, kPrefillSplitSlots);
    // About one wave: each tile takes at most wave / (tiles x heads) parts.
    ASSERT_LE(static_cast<int64_t>(tiles.size()) * heads,
              wave + static_cast<int64_t>(plan.size()) * heads);
  }
  // Both outcomes occurred (the test exercised the split).
  EXPECT_GT(split_batches, 20);
  EXPECT_GT(unsplit_batches, 20);
}

TEST(PrefillSplit, AShortChunkAtALongContextFillsAboutAWave) {
  // One prompt's 64-row tail chunk at context 8,192, Qwen2.5-7B's 28 heads, 132 SMs x 2 blocks:
  // one tile of 28 blocks becomes 9 parts (252 blocks) of 14-15 KV tiles each.
  ForwardBatchBuilder builder(64, 130);
  const std::vector<int32_t> table(130, 0), tokens(64, 1);
  builder.add(tokens, 8192 - 64, std::span(table).first(128));
  const ForwardBatch b = builder.batch();
  std::vector<PrefillTile> tiles;
  plan_prefill(b, 2, tiles);
  ASSERT_EQ(tiles.size(), 1u);
  std::vector<PrefillMerge> merges;
  split_prefill(b, 28, 264, tiles, merges);
  ASSERT_EQ(merges.size(), 1u);
  EXPECT_EQ(merges[0].parts, 9);
  EXPECT_EQ(tiles.size(), 9u);
  // A whole 8,192-token prompt (128 tiles) is left as it is.
  ForwardBatchBuilder whole(64, 130);
  const std::vector<int32_t> prompt(8192, 1);
  whole.add(prompt, 0, std::span(table).first(128));
  const ForwardBatch w = whole.batch();
  plan_prefill(w, 2, tiles);
  split_prefill(w, 28, 264, tiles, merges);
  EXPECT_TRUE(merges.empty());
  EXPECT_EQ(tiles.size(), 128u);
}

// plan_int4_pool_rows: a sequence's pool positions pa .. pb - 1 (pa = B after a sink block), rows
// in the order the tiles first name the sequences, while they fit, then the whole tiles of 64
// the room left holds of the next; none for a sequence without pool blocks; max_tiles the
// largest count of tiles in rows.
TEST(Int4PoolRows, RowsInTileOrderWhileTheyFit) {
  constexpr int kB = 32;
  constexpr int64_t kPoolBlocks = 1000;  // ids from here on are sink blocks
  // Sequences: 0 pool of 10 blocks after a sink, 1 none, 2 pool of 3 blocks, 3 pool of 5.
  const std::vector<int32_t> pool_ends = {11, 0, 3, 5};
  ForwardBatchBuilder builder(kB, 1);  // each sequence one token, in its first block
  const int32_t token = 0;
  for (const int32_t first_block : {1003, 7, 12, 1001}) {
    builder.add({&token, 1}, 0, {&first_block, 1});
  }
  const ForwardBatch b = builder.batch();
  const std::vector<PrefillTile> tiles = {{2, 0, 64},    {0, 64, 128},  {2, 64, 100},
                                          {1, 128, 130}, {3, 130, 194}, {0, 194, 200}};
  Int4PoolRows r;
  plan_int4_pool_rows(b, tiles, pool_ends, kPoolBlocks, kB, 1 << 20, r);
  EXPECT_EQ(r.base, (std::vector<int32_t>{96, -1, 0, 416}));
  EXPECT_EQ(r.tiles, (std::vector<int32_t>{5, 0, 2, 2}));  // the last tile of 2 may be short
  EXPECT_EQ(r.seqs, (std::vector<int32_t>{2, 0, 3}));
  EXPECT_EQ(r.rows, 96 + 320 + 128);  // 3 blocks; 10 after the sink; 4 after the sink
  EXPECT_EQ(r.max_tiles, 5);          // 320 positions
  // Room for 300 rows: sequence 2 (96) fits, of 0 (320) the 3 whole tiles the 204 rows left
  // hold, none of 3 (12 rows left).
  plan_int4_pool_rows(b, tiles, pool_ends, kPoolBlocks, kB, 300, r);
  EXPECT_EQ(r.base, (std::vector<int32_t>{96, -1, 0, -1}));
  EXPECT_EQ(r.tiles, (std::vector<int32_t>{3, 0, 2, 0}));
  EXPECT_EQ(r.seqs, (std::vector<int32_t>{2, 0}));
  EXPECT_EQ(r.rows, 96 + 192);
  EXPECT_EQ(r.max_tiles, 3);
  // Room for 150: sequence 2, then 54 rows, less than a tile: nothing of 0 or 3.
  plan_int4_pool_rows(b, tiles, pool_ends, kPoolBlocks, kB, 150, r);
  EXPECT_EQ(r.base, (std::vector<int32_t>{-1, -1, 0, -1}));
  EXPECT_EQ(r.seqs, (std::vector<int32_t>{2}));
  EXPECT_EQ(r.rows, 96);
  // No room: nothing planned.
  plan_int4_pool_rows(b, tiles, pool_ends, kPoolBlocks, kB, 0, r);
  EXPECT_EQ(r.base, (std::vector<int32_t>(4, -1)));
  EXPECT_EQ(r.tiles, (std::vector<int32_t>(4, 0)));
  EXPECT_TRUE(r.seqs.empty());
  EXPECT_EQ(r.max_tiles, 0);
  // A tile of a sequence the arrays do not have is an internal error (S4KV_CHECK aborts).
  const std::vector<PrefillTile> bad = {{4, 0, 64}};
  EXPECT_DEATH(plan_int4_pool_rows(b, bad, pool_ends, kPoolBlocks, kB, 100, r),
               "tile of sequence 4");
}

}  // namespace
}  // namespace s4kv::backend::cuda
