// The host's plan of a step's attention (decode_attention.cuh: plan_attention), which needs no
// device: on random batches of every KV format, every decode row's context is covered exactly
// once by its items (int4_kivi: pool blocks by int4 items, never a sink block; the sink block,
// window and tail by row items), items are never empty, splits respect the minimum length, the
// int4 items come first, other rows go to the reference kernel, and the item counts stay within
// decode_capacity per kind (the grids of a CUDA graph replay) and max_decode_items (the partial
// sums are sized by it).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/decode_attention.cuh"
#include "backend/forward_batch_builder.h"

namespace s4kv::backend::cuda {
namespace {

struct Case {
  kv::KvCacheDtype cache;
  int block_size;
  int ring;   // int4_kivi: 1 + window blocks
  bool sink;  // int4_kivi v2: each sequence's first block is a sink block
};

TEST(DecodePlan, CoversEveryDecodeRowsContextOnce) {
  const Case cases[] = {{kv::KvCacheDtype::k16Bit, 16, 1, false},
                        {kv::KvCacheDtype::kFp8E4M3, 64, 1, false},
                        {kv::KvCacheDtype::kInt4Kivi, 32, 2, true},
                        {kv::KvCacheDtype::kInt4Kivi, 64, 2, true},
                        {kv::KvCacheDtype::kInt4Kivi, 128, 1, false}};
  std::mt19937 rng(3);
  for (const Case& c : cases) {
    for (const int num_sms : {1, 8, 132}) {
      for (const int blocks_per_sm : {1, 2, 3, 4}) {
        for (int trial = 0; trial < 20; ++trial) {
          const int64_t B = c.block_size, num_pool = 100000, max_len = 20000;
          const int64_t max_blocks = max_len / B + 1;
          DecodeShape shape;
          shape.cache = c.cache;
          shape.block_size = c.block_size;
          shape.num_pool_blocks = num_pool;
          shape.ring = c.ring;
          shape.num_kv_heads = 4;
          shape.num_sms = num_sms;
          shape.blocks_per_sm = blocks_per_sm;
          const bool int4 = c.cache == kv::KvCacheDtype::kInt4Kivi;
          ForwardBatchBuilder builder(B, max_blocks);
          std::uniform_int_distribution<int64_t> len(1, max_len - 64), q(1, 40), coin(0, 3);
          const int num_seqs = 1 + trial % 12;
          std::vector<int32_t> table(static_cast<size_t>(max_blocks));
          for (int s = 0; s < num_seqs; ++s) {
            const int64_t computed = len(rng);
            const int64_t q_len = coin(rng) == 0 ? q(rng) : 1;
            for (size_t j = 0; j < table.size(); ++j) {
              table[j] =
                  static_cast<int32_t>((s * max_blocks + static_cast<int64_t>(j)) % num_pool);
            }
            if (c.sink) table[0] = static_cast<int32_t>(num_pool + s);
            const int64_t seat_start = int4 && coin(rng) == 0 ? computed / B / 2 * B : 0;
            const std::vector<int32_t> tokens(static_cast<size_t>(q_len), 1);
            builder.add(tokens, computed,
                        std::span(table).first(static_cast<size_t>((computed + q_len + B - 1) / B)),
                        int4 ? s : -1, seat_start);
          }
          const ForwardBatch b = builder.batch();
          DecodePlan plan;
          plan_attention(b, shape, true, plan);
          SCOPED_TRACE(testing::Message() << "block " << B << " sms " << num_sms << " x "
                                          << blocks_per_sm << " trial " << trial);
          ASSERT_LE(static_cast<int64_t>(plan.items.size()), max_decode_items(num_seqs, shape));
          const DecodeCapacity cap = decode_capacity(num_seqs, shape);
          ASSERT_LE(plan.num_int4_items, cap.int4_items);
          ASSERT_LE(static_cast<int64_t>(plan.items.size()) - plan.num_int4_items, cap.row_items);
          for (int32_t k = 0; k < static_cast<int32_t>(plan.items.size()); ++k) {
            ASSERT_LT(plan.items[k].begin, plan.items[k].end) << "item " << k;
          }
          // Prefill rows to the reference kernel; decode rows to the items.
          std::vector<int32_t> others;
          size_t d = 0;
          for (int64_t s = 0; s < b.num_seqs(); ++s) {
            const int32_t q0 = b.query_start_loc[s], q1 = b.query_start_loc[s + 1];
            if (q1 - q0 != 1) {
              for (int32_t t = q0; t < q1; ++t) others.push_back(t);
              continue;
            }
            ASSERT_LT(d, plan.seqs.size());
            const DecodeSeq& ds = plan.seqs[d++];
            ASSERT_EQ(ds.token, q0);
            const int64_t seq_len = b.seq_lens[s];
            std::vector<int> covered(static_cast<size_t>(seq_len), 0);
            for (int32_t k = ds.int4_begin; k < ds.int4_end; ++k) {
              const DecodeItem& it = plan.items[static_cast<size_t>(k)];
              ASSERT_TRUE(int4);
              ASSERT_LT(k, plan.num_int4_items);
              ASSERT_EQ(it.seq, s);
              ASSERT_EQ(it.merge, static_cast<int32_t>(d - 1)) << "item " << k << "'s merge";
              for (int64_t blk = it.begin; blk < it.end; ++blk) {
                ASSERT_LT(b.block_tables[s * b.max_num_blocks_per_seq + blk], num_pool)
                    << "a sink block in an int4 item";
                for (int64_t p = blk * B; p < (blk + 1) * B; ++p) ++covered[static_cast<size_t>(p)];
              }
              if (int4 && k > ds.int4_begin) {  // splits of at least 64 positions but the last
                const DecodeItem& prev = plan.items[static_cast<size_t>(k - 1)];
                ASSERT_GE((prev.end - prev.begin) * B, 64);
              }
            }
            for (int32_t k = ds.rows_begin; k < ds.rows_end; ++k) {
              const DecodeItem& it = plan.items[static_cast<size_t>(k)];
              ASSERT_GE(k, plan.num_int4_items);
              if (!int4 && k > ds.rows_begin) {  // the same for the row splits
                const DecodeItem& prev = plan.items[static_cast<size_t>(k - 1)];
                ASSERT_GE(prev.end - prev.begin, 64);
              }
              ASSERT_EQ(it.seq, s);
              ASSERT_EQ(it.merge, static_cast<int32_t>(d - 1)) << "item " << k << "'s merge";
              for (int64_t p = it.begin; p < it.end; ++p) ++covered[static_cast<size_t>(p)];
            }
            for (int64_t p = 0; p < seq_len; ++p) {
              ASSERT_EQ(covered[static_cast<size_t>(p)], 1) << "seq " << s << " position " << p;
            }
            if (int4) {
              ASSERT_EQ(plan.pool_ends[static_cast<size_t>(s)],
                        int4_pool_end(b, s, B, c.ring, num_pool));
            }
          }
          ASSERT_EQ(d, plan.seqs.size());
          ASSERT_EQ(plan.other_tokens, others);

          // decode = false: every row to the reference kernel, nothing planned.
          DecodePlan none;
          plan_attention(b, shape, false, none);
          ASSERT_TRUE(none.items.empty() && none.seqs.empty());
          ASSERT_EQ(static_cast<int64_t>(none.other_tokens.size()), b.num_tokens());
        }
      }
    }
  }
}

// The plan's items of a batch of equal contexts: thread blocks (items x KV heads) fill one or two
// whole waves of the device's resident blocks, not a wave and a fraction, and a single short
// context still splits into items of about a hundred positions (the decode step of batch 1).
DecodePlan split_plan(kv::KvCacheDtype cache, int block_size, int num_seqs, int64_t context,
                      int blocks_per_sm) {
  DecodeShape shape;
  shape.cache = cache;
  shape.block_size = block_size;
  shape.num_pool_blocks = 1000000;
  shape.num_kv_heads = 4;
  shape.num_sms = 132;
  shape.blocks_per_sm = blocks_per_sm;
  const int64_t max_blocks = context / block_size + 1;
  ForwardBatchBuilder builder(block_size, max_blocks);
  std::vector<int32_t> table(static_cast<size_t>(max_blocks));
  for (int s = 0; s < num_seqs; ++s) {
    for (size_t j = 0; j < table.size(); ++j) {
      table[j] = static_cast<int32_t>(s * max_blocks + static_cast<int64_t>(j));
    }
    builder.add(std::vector<int32_t>{1}, context - 1, table, s, 0);
  }
  DecodePlan plan;
  plan_attention(builder.batch(), shape, true, plan);
  return plan;
}
int64_t split_items(kv::KvCacheDtype cache, int block_size, int num_seqs, int64_t context,
                    int blocks_per_sm) {
  return static_cast<int64_t>(
      split_plan(cache, block_size, num_seqs, context, blocks_per_sm).items.size());
}

TEST(DecodePlan, EqualContextsFillWholeWaves) {
  // 16 sequences of 8,192 in blocks of 16, 3 row blocks a multiprocessor: a wave is
  // 132 * 3 / 4 = 99 items; 6 items a sequence (96) fill one wave.
  EXPECT_EQ(split_items(kv::KvCacheDtype::k16Bit, 16, 16, 8192, 3), 96);
  // The same at 4 blocks a multiprocessor (a wave of 132 items): 8 items a sequence.
  EXPECT_EQ(split_items(kv::KvCacheDtype::k16Bit, 16, 16, 8192, 4), 128);
  // Batch 1 at context 1,040: 11 items of 96 positions (6 blocks of 16), the least estimate of
  // 96 positions an item + 12 x 11 items merged (64 positions: 64 + 12 x 17; 256: 256 + 12 x 5).
  EXPECT_EQ(split_items(kv::KvCacheDtype::k16Bit, 16, 1, 1040, 3), 11);
  // int4_kivi, blocks of 64, 2 blocks a multiprocessor (a wave of 66 items), 64 sequences of
  // 8,192: the 127 pool blocks of each (the last block is in the ring) as one item fill one wave
  // (two waves of 2 items a sequence would take longer), then one row item a sequence (the tail).
  EXPECT_EQ(split_items(kv::KvCacheDtype::kInt4Kivi, 64, 64, 8192, 2), 64 + 64);
  // 8 sequences of 8,192: a wave holds 8 items of 16 blocks each (8 x 8 = 64 <= 66).
  EXPECT_EQ(split_items(kv::KvCacheDtype::kInt4Kivi, 64, 8, 8192, 2), 8 * 8 + 8);
}

// The fused merge's choice (S4KV_DECODE_MERGE=fused): a step whose sequences have at most
// kFusedMergeItems items each merges in the items; one long context at a small batch, split
// over the device, goes to the merge kernel.
TEST(DecodePlan, ItemsMergeWhereSequencesHaveFewItems) {
  for (const auto cache : {kv::KvCacheDtype::k16Bit, kv::KvCacheDtype::kInt4Kivi}) {
    const int B = cache == kv::KvCacheDtype::kInt4Kivi ? 64 : 16;
    const DecodePlan b16 = split_plan(cache, B, 16, 8192, 3);  // 6 or 7 items a sequence
    EXPECT_TRUE(merge_in_items(b16));
    const DecodePlan b1 = split_plan(cache, B, 1, 1040, 3);  // batch 1 at 1k
    EXPECT_TRUE(merge_in_items(b1)) << b1.items.size() << " items";
    const DecodePlan long1 = split_plan(cache, B, 1, 131072, 3);  // batch 1 at 128k
    EXPECT_GT(static_cast<int64_t>(long1.items.size()), kFusedMergeItems);
    EXPECT_FALSE(merge_in_items(long1));
  }
}

}  // namespace
}  // namespace s4kv::backend::cuda
