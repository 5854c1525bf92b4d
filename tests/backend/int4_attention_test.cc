// Attention over int4_kivi pool blocks read in place (int4_attention.h, context_attention with
// an Int4BlockRun) against the gather path, on random data:
//   the block kernels equal "kv reference dequantization, rope_rotate, eight-lane dot" and
//   "dequantize, o += w * v in position order" bit for bit, for every instruction set, block
//   size, value group size and number of queries, with keys before and after RoPE;
//   a whole cache's attention (decode and multi-token steps, partial blocks, GQA ratios 1 to 7,
//   format v1 and v2: sink block, window and Hadamard values, a window block read from the pool
//   after a prefix-cache hit; keys after RoPE) equals
//   context_attention_ref over the cache's gather bit for bit, and never gathers a position of
//   the run (no dequantized copy of it is made).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/cpu_kv_cache.h"
#include "backend/cpu/int4_attention.h"
#include "backend/cpu/int4_kivi_kv_cache.h"
#include "backend/cpu/rope.h"
#include "backend/cpu/thread_pool.h"
#include "backend/rope_table.h"
#include "batch_builder.h"
#include "kv/int4_kivi_ref.h"

namespace s4kv::backend::cpu {
namespace {

constexpr int kD = 128;

std::vector<CpuIsa> isas() {
  std::vector<CpuIsa> out;
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (cpu_supports(isa)) out.push_back(isa);
  }
  return out;
}

std::vector<float> inv_freq() { return rope_inv_freq(kD, 10000.0, model::RopeScaling{}); }

std::vector<float> randn(size_t n, std::mt19937& rng, float offset_scale = 0.0f) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {
    x[i] = 2.0f * dist(rng) + offset_scale * static_cast<float>(static_cast<int>(i % kD % 7) - 3);
  }
  return x;
}

// attention.cc's dot: eight partial sums in channel order, added as a tree.
float dot8(const float* q, const float* k) {
  float acc[8] = {};
  for (int i = 0; i < kD; i += 8) {
    for (int u = 0; u < 8; ++u) acc[u] += q[i + u] * k[i + u];
  }
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

TEST(Int4BlockKernels, EqualDequantizeRotateAndAttendBitForBit) {
  std::mt19937 rng(3);
  RopeTable rope(inv_freq());
  rope.ensure(4096);
  for (int bs : {32, 64, 128}) {
    for (int gv : {32, 64, 128}) {
      const auto layout = kv::Int4KiviLayout::create(bs, kD, gv);
      ASSERT_TRUE(layout.is_ok());
      std::vector<std::byte> block(layout->block_bytes);
      kv::quantize_block_ref(*layout, randn(bs * kD, rng, 1.0f), randn(bs * kD, rng), block);
      std::vector<float> keys(bs * kD), values(bs * kD);
      kv::dequantize_keys_block_ref(*layout, block, keys);
      kv::dequantize_values_block_ref(*layout, block, values);
      const int64_t pos0 = 3 * bs;
      for (int nq : {1, 2, 3, 5, 8}) {
        const auto q = randn(static_cast<size_t>(nq * kD), rng);
        const auto w = randn(static_cast<size_t>(nq * bs), rng);
        const auto o0 = randn(static_cast<size_t>(nq * kD), rng);
        for (const bool rotate : {true, false}) {
          std::vector<float> want_s(nq * bs), want_o = o0;
          for (int t = 0; t < bs; ++t) {
            std::vector<float> k(keys.begin() + t * kD, keys.begin() + (t + 1) * kD);
            if (rotate) rope_rotate(k.data(), k.data(), rope.cos(pos0 + t), rope.sin(pos0 + t), kD);
            for (int r = 0; r < nq; ++r) {
              want_s[r * bs + t] = dot8(q.data() + r * kD, k.data()) * 0.125f;
              for (int c = 0; c < kD; ++c) {
                want_o[r * kD + c] += w[r * bs + t] * values[t * kD + c];
              }
            }
          }
          for (CpuIsa isa : isas()) {
            std::vector<float> got_s(nq * bs, -1.0f), got_o = o0;
            std::vector<const float*> qs, ws;
            std::vector<float*> ss, os;
            for (int r = 0; r < nq; ++r) {
              qs.push_back(q.data() + r * kD);
              ss.push_back(got_s.data() + r * bs);
              ws.push_back(w.data() + r * bs);
              os.push_back(got_o.data() + r * kD);
            }
            int4_block_scores(isa, *layout, block.data(), rotate ? &rope : nullptr, pos0, qs,
                              0.125f, ss);
            int4_block_values(isa, *layout, block.data(), ws, os);
            const auto what = ::testing::Message() << cpu_isa_name(isa) << " B " << bs << " Gv "
                                                   << gv << " nq " << nq << " rope " << rotate;
            ASSERT_EQ(got_s, want_s) << what;
            ASSERT_EQ(got_o, want_o) << what;
          }
        }
      }
    }
  }
}

// ---- A whole cache: context_attention with the run against context_attention_ref ----

struct Case {
  int64_t block_size, value_group_size, num_kv_heads, num_heads;
  kv::Int4KiviVariant variant;
  bool post_rope = false;
};

struct Seq {
  std::vector<float> k, v;  // [len, kv_heads * D] fp32, keys after RoPE
  std::vector<int32_t> table;
  int32_t slot = 0;
  int64_t seat_start = 0;  // tokens it had when it took its slot (as after a prefix-cache hit)
};

class CacheRun {
 public:
  explicit CacheRun(const Case& c) : c_(c), elems_(c.num_kv_heads * kD) {
    config_.num_blocks = 4 * kMaxBlocks;
    config_.block_size = c.block_size;
    config_.dtype = kv::KvCacheDtype::kInt4Kivi;
    config_.num_seats = 8;
    config_.value_group_size = c.value_group_size;
    config_.int4_keys_post_rope = c.post_rope;
    config_.num_sink_blocks = c.variant.sink_blocks > 0 ? 4 : 0;
    config_.num_window_blocks = c.variant.window_blocks;
    config_.int4_value_hadamard = c.variant.value_hadamard;
    auto made = make_cpu_kv_cache(config_, {1, c.num_kv_heads, kD, DType::kBF16}, inv_freq());
    S4KV_CHECK(made.is_ok(), made.status().message());
    cache_ = std::move(made).value();
  }

  // Sequence i of length len: its own blocks (the first a sink block with the sink variant).
  Seq make_seq(int64_t len, int i) {
    std::mt19937 rng(100 + static_cast<uint32_t>(i));
    Seq s;
    s.k = randn(static_cast<size_t>(len * elems_), rng, 1.0f);
    s.v = randn(s.k.size(), rng);
    std::vector<int32_t> pos(static_cast<size_t>(len));
    std::iota(pos.begin(), pos.end(), 0);
    rope_ref(s.k, elems_, c_.num_kv_heads, kD, pos, inv_freq());
    s.table.resize(kMaxBlocks);
    for (int64_t b = 0; b < kMaxBlocks; ++b) s.table[b] = static_cast<int32_t>(i * kMaxBlocks + b);
    if (c_.variant.sink_blocks > 0) s.table[0] = static_cast<int32_t>(config_.num_blocks + i);
    s.slot = i;
    return s;
  }

  // One step of tokens [begin, end) of each sequence; with `compare`, attention both ways (each
  // instruction set) must agree bit for bit and the run's positions must never be gathered.
  // Returns how many (sequence, kv head) runs were not empty.
  int step(const std::vector<const Seq*>& seqs,
           const std::vector<std::pair<int64_t, int64_t>>& ranges, bool compare) {
    testing::BatchBuilder builder(c_.block_size, kMaxBlocks);
    std::vector<float> k, v;
    for (size_t i = 0; i < seqs.size(); ++i) {
      const auto [b, e] = ranges[i];
      builder.add(std::vector<int32_t>(static_cast<size_t>(e - b), 0), b, seqs[i]->table,
                  seqs[i]->slot, std::min(b, seqs[i]->seat_start));
      k.insert(k.end(), seqs[i]->k.begin() + b * elems_, seqs[i]->k.begin() + e * elems_);
      v.insert(v.end(), seqs[i]->v.begin() + b * elems_, seqs[i]->v.begin() + e * elems_);
    }
    const ForwardBatch batch = builder.batch();
    cache_->begin_step(batch);
    cache_->write(0, batch, k, v, elems_);
    std::mt19937 rng(7);
    const auto q = randn(static_cast<size_t>(batch.num_tokens() * c_.num_heads * kD), rng);
    std::vector<float> want(q.size());
    AttentionArgs a{q,
                    c_.num_heads * kD,
                    c_.num_heads,
                    c_.num_kv_heads,
                    kD,
                    0.09f,
                    batch.query_start_loc,
                    batch.seq_lens,
                    want};
    std::mutex mu;
    std::vector<std::array<int64_t, 3>> asked;  // (seq * kv heads + head, begin, end) gathered
    const KvGatherFn gather = [&](int64_t s, int64_t g, int64_t b, int64_t e, float* kk,
                                  float* vv) {
      std::lock_guard lock(mu);
      asked.push_back({s * c_.num_kv_heads + g, b, e});
      return cache_->gather_range(0, batch, s, g, b, e, kk, vv);
    };
    int runs = 0;
    if (compare) {
      ThreadPool pool(2);
      context_attention_ref(a, gather, nullptr);
      for (CpuIsa isa : isas()) {
        asked.clear();
        std::vector<float> got(q.size(), -1.0f);
        a.out = got;
        a.isa = isa;
        const KvInPlaceRunFn run = [&](int64_t s, int64_t g) {
          return KvInPlaceRun{.int4 = cache_->int4_run(0, batch, s, g)};
        };
        context_attention(a, gather, run, &pool);
        EXPECT_EQ(got, want) << cpu_isa_name(isa);
        runs = 0;
        for (size_t s = 0; s < seqs.size(); ++s) {
          for (int64_t g = 0; g < c_.num_kv_heads; ++g) {
            const Int4BlockRun r = cache_->int4_run(0, batch, static_cast<int64_t>(s), g);
            if (r.empty()) continue;
            ++runs;
            for (const auto& [sg, b, e] : asked) {
              if (sg != static_cast<int64_t>(s) * c_.num_kv_heads + g) continue;
              EXPECT_TRUE(e <= r.first * c_.block_size || b >= r.end * c_.block_size)
                  << "gathered [" << b << ", " << e << ") of the run";
            }
          }
        }
      }
    } else {
      context_attention_ref(a, gather, nullptr);
    }
    cache_->commit(0, batch, nullptr);
    return runs;
  }

 private:
  static constexpr int64_t kMaxBlocks = 24;
  Case c_;
  int64_t elems_;
  KvCacheConfig config_;
  std::unique_ptr<CpuKvCache> cache_;
};

void run_case(const Case& c) {
  SCOPED_TRACE(::testing::Message()
               << "B " << c.block_size << " Gv " << c.value_group_size << " heads " << c.num_heads
               << "/" << c.num_kv_heads << " sink " << c.variant.sink_blocks << " window "
               << c.variant.window_blocks << " hadamard " << c.variant.value_hadamard
               << " post-RoPE " << c.post_rope);
  CacheRun cr(c);
  const int64_t B = c.block_size;
  // Contexts with partial blocks, a whole number of blocks, and one shorter than two blocks.
  const std::vector<int64_t> lens{5 * B + 3, 4 * B, B + 7, 7 * B - 1};
  std::vector<Seq> seqs;
  for (size_t i = 0; i < lens.size(); ++i)
    seqs.push_back(cr.make_seq(lens[i] + 40, static_cast<int>(i)));
  std::vector<const Seq*> ptrs;
  for (const Seq& s : seqs) ptrs.push_back(&s);
  std::vector<std::pair<int64_t, int64_t>> prefill, decode, more;
  for (int64_t len : lens) {
    prefill.push_back({0, len - 1});
    decode.push_back({len - 1, len});
    more.push_back({len, len + 37});  // a multi-token step: two query chunks, causal in them
  }
  cr.step(ptrs, prefill, false);
  // From here on the second sequence's slot holds only positions >= 3B, so with the window its
  // block 2 is read from the pool, not from the ring.
  seqs[1].seat_start = 3 * B;
  EXPECT_GT(cr.step(ptrs, decode, true), 0);
  EXPECT_GT(cr.step(ptrs, more, true), 0);
}

TEST(Int4AttentionInPlace, EqualsTheGatherPathBitForBit) {
  const kv::Int4KiviVariant v1{0, 0, false}, v2{1, 1, true};
  for (int64_t bs : {32, 64, 128}) run_case({bs, 128, 2, 4, v2});
  for (int64_t gv : {32, 64}) run_case({64, gv, 2, 4, v2});
  for (int64_t heads : {2, 8, 14}) run_case({32, 128, 2, heads, v2});
  run_case({32, 64, 2, 4, v1});
  run_case({32, 128, 1, 7, {1, 0, false}});
  run_case({32, 128, 2, 4, {0, 1, true}});
  run_case({64, 128, 2, 4, v2, /*post_rope=*/true});
}

}  // namespace
}  // namespace s4kv::backend::cpu
