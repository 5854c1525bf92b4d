// The CPU backend's fp8_e4m3 and int4_kivi caches on random data, without a model:
//   RopeTable's rotation equals rope_ref's bit for bit, and its inverse undoes it;
//   (b) attention over int4_kivi equals "dequantize with the kv reference, rotate with rope_ref,
//       keep the residual and new tokens 16-bit, run the same attention kernel": exactly (same
//       kernel, same fp32 inputs, same order), and the dense double reference within 2e-5;
//   (c) quantize-on-fill writes the bytes kv::quantize_block_ref gives on the inverse-rotated
//       (independently computed here) 16-bit keys, and pre-RoPE keys with int4_keys_post_rope;
//   (d) one step, chunks and token by token leave identical pool bytes and residuals;
//   (f) shuffled block ids and residual slots change no pool byte, residual or output bit;
//   fp8: what attention reads is fp8(16-bit(x)), widened exactly;
//   int4 candidate formats: the sink block stays 16-bit and the rest is unchanged; Hadamard
//   values are quantized rotated and attention's single rotation back equals per-row rotation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/cpu_kv_cache.h"
#include "backend/cpu/int4_dequant.h"
#include "backend/cpu/int4_kivi_kv_cache.h"
#include "backend/cpu/rope.h"
#include "backend/cpu/thread_pool.h"
#include "backend/rope_table.h"
#include "batch_builder.h"
#include "common/half.h"
#include "kv/fp8_e4m3.h"
#include "kv/hadamard.h"
#include "kv/int4_kivi_ref.h"

namespace s4kv::backend::cpu {
namespace {

constexpr int64_t kD = 128, kKvHeads = 2, kHeads = 4, kSlotElems = kKvHeads * kD;
constexpr int64_t kMaxBlocks = 16;

std::vector<float> inv_freq() { return rope_inv_freq(kD, 10000.0, model::RopeScaling{}); }

// Post-RoPE-like keys: random channels plus a per-channel offset (a k_proj bias), rotated.
struct Seq {
  std::vector<float> k, v;  // [len, kSlotElems] fp32, keys after RoPE
  std::vector<int32_t> table;
  int32_t slot = 0;
  int64_t seat_start = 0;  // tokens computed when it took its slot (a prefix-cache hit)
};

Seq make_seq(int64_t len, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  Seq s;
  s.k.resize(static_cast<size_t>(len * kSlotElems));
  s.v.resize(s.k.size());
  for (size_t i = 0; i < s.k.size(); ++i) {
    s.k[i] = 2.0f * dist(rng) + static_cast<float>((i % kD) % 7) - 3.0f;
    s.v[i] = dist(rng);
  }
  std::vector<int32_t> pos(static_cast<size_t>(len));
  std::iota(pos.begin(), pos.end(), 0);
  rope_ref(s.k, kSlotElems, kKvHeads, kD, pos, inv_freq());
  s.table.resize(kMaxBlocks);
  std::iota(s.table.begin(), s.table.end(), 0);
  return s;
}

KvCacheConfig int4_config(int64_t block_size, int64_t gv = 128, bool post_rope = false) {
  KvCacheConfig c;
  c.num_blocks = 2 * kMaxBlocks;
  c.block_size = block_size;
  c.dtype = kv::KvCacheDtype::kInt4Kivi;
  c.num_seats = 8;
  c.value_group_size = gv;
  c.int4_keys_post_rope = post_rope;
  return c;
}

std::unique_ptr<CpuKvCache> make_cache(const KvCacheConfig& c) {
  auto made = make_cpu_kv_cache(c, {1, kKvHeads, kD, DType::kBF16}, inv_freq());
  S4KV_CHECK(made.is_ok(), made.status().message());
  return std::move(made).value();
}

Int4KiviKvCache& int4(CpuKvCache& c) { return dynamic_cast<Int4KiviKvCache&>(c); }

// A batch of tokens [begin, end) of each sequence, with their K/V rows.
struct Built {
  testing::BatchBuilder builder{0, kMaxBlocks};
  std::vector<float> k, v;
};

Built build(int64_t block_size, bool int4, const std::vector<const Seq*>& seqs,
            const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  Built out{testing::BatchBuilder(block_size, kMaxBlocks), {}, {}};
  for (size_t i = 0; i < seqs.size(); ++i) {
    const auto [begin, end] = ranges[i];
    std::vector<int32_t> tokens(static_cast<size_t>(end - begin), 0);
    out.builder.add(tokens, begin, seqs[i]->table, int4 ? seqs[i]->slot : -1, seqs[i]->seat_start);
    const auto& s = *seqs[i];
    out.k.insert(out.k.end(), s.k.begin() + begin * kSlotElems, s.k.begin() + end * kSlotElems);
    out.v.insert(out.v.end(), s.v.begin() + begin * kSlotElems, s.v.begin() + end * kSlotElems);
  }
  return out;
}

// Attention of random queries (seeded) over whatever `gather` gives.
std::vector<float> attend(const ForwardBatch& batch, const KvGatherFn& gather, ThreadPool* pool,
                          uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> q(static_cast<size_t>(batch.num_tokens() * kHeads * kD)), out(q.size());
  for (auto& x : q) x = dist(rng);
  const AttentionArgs a{q,
                        kHeads * kD,
                        kHeads,
                        kKvHeads,
                        kD,
                        1.0f / std::sqrt(float{kD}),
                        batch.query_start_loc,
                        batch.seq_lens,
                        out};
  context_attention_ref(a, gather, pool);
  return out;
}

// One step over sequences on layer 0: kv_write -> attention -> kv_commit. Returns attention's
// output.
std::vector<float> step(CpuKvCache& cache, int64_t block_size, const std::vector<const Seq*>& seqs,
                        const std::vector<std::pair<int64_t, int64_t>>& ranges,
                        ThreadPool* pool = nullptr, uint32_t seed = 1) {
  const bool is_int4 = dynamic_cast<Int4KiviKvCache*>(&cache) != nullptr;
  const Built built = build(block_size, is_int4, seqs, ranges);
  const ForwardBatch batch = built.builder.batch();
  cache.begin_step(batch);
  cache.write(0, batch, built.k, built.v, kSlotElems);
  const auto out = attend(
      batch,
      [&](int64_t s, int64_t g, int64_t b, int64_t e, float* k, float* v) {
        return cache.gather_range(0, batch, s, g, b, e, k, v);
      },
      pool, seed);
  cache.commit(0, batch, pool);
  return out;
}

float bf16(float x) { return bf16_to_float(float_to_bf16(x)); }

TEST(RopeTable, RotationMatchesRopeRefAndInverseUndoesIt) {
  const auto freq = inv_freq();
  RopeTable table(freq);
  table.ensure(5000);
  EXPECT_GE(table.num_positions(), 5000);
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  for (int32_t pos : {0, 1, 63, 64, 1000, 4095, 4999}) {
    std::vector<float> x(kD);
    for (auto& e : x) e = dist(rng);
    std::vector<float> ref = x, ours(kD), back(kD);
    rope_ref(ref, kD, 1, kD, std::vector<int32_t>{pos}, freq);
    rope_rotate(x.data(), ours.data(), table.cos(pos), table.sin(pos), kD);
    EXPECT_EQ(ours, ref) << "position " << pos;
    rope_unrotate(ours.data(), back.data(), table.cos(pos), table.sin(pos), kD);
    for (int64_t i = 0; i < kD; ++i) EXPECT_NEAR(back[i], x[i], 1e-5f * (1 + std::abs(x[i])));
  }
}

// The rotation on every instruction set (scalar, AVX2, AVX-512: what rope_rotate picks at run
// time) gives the scalar form's bits, both directions, in place and not, for head dims whose
// half is a multiple of 16, of 8 only, and neither (the tails).
TEST(RopeTable, EveryInstructionSetRotatesBitForBitAlike) {
  std::mt19937 rng(9);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  for (const int64_t d : {int64_t{128}, int64_t{80}, int64_t{136}, int64_t{12}}) {
    std::vector<float> freq(static_cast<size_t>(d / 2));
    for (size_t i = 0; i < freq.size(); ++i) freq[i] = std::pow(10000.0f, -2.0f * i / d);
    RopeTable table(freq);
    table.ensure(3000);
    for (int32_t pos : {0, 7, 2999}) {
      std::vector<float> x(static_cast<size_t>(d));
      for (auto& e : x) e = dist(rng);
      for (const bool inverse : {false, true}) {
        std::vector<float> want(x.size());
        rope_rotate_isa(CpuIsa::kScalar, inverse, x.data(), want.data(), table.cos(pos),
                        table.sin(pos), d);
        for (const CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512}) {
          if (!cpu_supports(isa)) continue;
          std::vector<float> got(x.size()), in_place = x;
          rope_rotate_isa(isa, inverse, x.data(), got.data(), table.cos(pos), table.sin(pos), d);
          rope_rotate_isa(isa, inverse, in_place.data(), in_place.data(), table.cos(pos),
                          table.sin(pos), d);
          EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4))
              << cpu_isa_name(isa) << " d " << d << " pos " << pos << " inverse " << inverse;
          EXPECT_EQ(0, std::memcmp(in_place.data(), want.data(), got.size() * 4))
              << cpu_isa_name(isa) << " in place, d " << d;
        }
      }
    }
  }
}

// (c) The pool block of a filled block against the kv reference on independently inverse-
// rotated keys; the tail in the residual, bit for bit the 16-bit values.
// The cache's block dequantization on every instruction set equals the kv reference bit for
// bit, for every block size and value group, on blocks with outliers, constant channels and
// zeros.
TEST(Int4Dequantize, EqualsTheKvReferenceBitForBit) {
  std::mt19937 rng(21);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (const int b : {32, 64, 128}) {
    for (const int gv : {32, 64, 128}) {
      auto layout = kv::Int4KiviLayout::create(b, 128, gv);
      ASSERT_TRUE(layout.is_ok());
      std::vector<float> keys(static_cast<size_t>(b * 128)), values(keys.size());
      for (size_t i = 0; i < keys.size(); ++i) {
        keys[i] = i % 128 == 5 ? 0.25f : dist(rng) * (i % 97 == 0 ? 40.0f : 1.0f);
        values[i] = i % 200 == 0 ? 0.0f : dist(rng);
      }
      std::vector<std::byte> block(layout->block_bytes);
      kv::quantize_block_ref(*layout, keys, values, block);
      std::vector<float> ref_k(keys.size()), ref_v(keys.size());
      kv::dequantize_keys_block_ref(*layout, block, ref_k);
      kv::dequantize_values_block_ref(*layout, block, ref_v);
      for (const CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
        if (!cpu_supports(isa)) continue;
        std::vector<float> k(keys.size()), v(keys.size());
        dequantize_keys_block(isa, *layout, block, k);
        dequantize_values_block(isa, *layout, block, v);
        ASSERT_EQ(0, std::memcmp(k.data(), ref_k.data(), k.size() * 4))
            << cpu_isa_name(isa) << " keys B" << b;
        ASSERT_EQ(0, std::memcmp(v.data(), ref_v.data(), v.size() * 4))
            << cpu_isa_name(isa) << " values B" << b << " Gv" << gv;
      }
    }
  }
}

TEST(Int4KiviCache, QuantizeOnFillMatchesTheKvReference) {
  for (bool post_rope : {false, true}) {
    SCOPED_TRACE(post_rope ? "post-RoPE keys" : "pre-RoPE keys");
    const int64_t bs = 32;
    auto cache = make_cache(int4_config(bs, 64, post_rope));
    Seq s = make_seq(2 * bs + 5, 11);
    s.slot = 3;
    step(*cache, bs, {&s}, {{0, 2 * bs + 5}});
    const auto& c = int4(*cache);
    const auto freq = inv_freq();
    for (int64_t blk = 0; blk < 2; ++blk) {
      for (int64_t g = 0; g < kKvHeads; ++g) {
        std::vector<float> keys(bs * kD), values(bs * kD);
        for (int64_t t = 0; t < bs; ++t) {
          const int64_t pos = blk * bs + t;
          const float* kr = s.k.data() + pos * kSlotElems + g * kD;
          const float* vr = s.v.data() + pos * kSlotElems + g * kD;
          for (int64_t i = 0; i < kD / 2; ++i) {
            const float angle = freq[i] * static_cast<float>(pos);
            const auto cs = static_cast<float>(std::cos(double{angle}));
            const auto sn = static_cast<float>(std::sin(double{angle}));
            const float x1 = bf16(kr[i]), x2 = bf16(kr[i + kD / 2]);
            const float a1 = x1 * cs, b1 = x2 * sn, a2 = x2 * cs, b2 = x1 * sn;
            keys[t * kD + i] = post_rope ? x1 : a1 + b1;
            keys[t * kD + i + kD / 2] = post_rope ? x2 : a2 - b2;
          }
          for (int64_t i = 0; i < kD; ++i) values[t * kD + i] = bf16(vr[i]);
        }
        std::vector<std::byte> want(c.layout().block_bytes);
        kv::quantize_block_ref(c.layout(), keys, values, want);
        const auto got = c.block(0, s.table[blk], g);
        ASSERT_TRUE(std::equal(got.begin(), got.end(), want.begin())) << "block " << blk;
      }
    }
    const auto rk = c.residual_k(0, s.slot);
    const auto rv = c.residual_v(0, s.slot);
    for (int64_t p = 2 * bs; p < 2 * bs + 5; ++p) {
      for (int64_t i = 0; i < kSlotElems; ++i) {
        ASSERT_EQ(rk[(p % bs) * kSlotElems + i], float_to_bf16(s.k[p * kSlotElems + i]));
        ASSERT_EQ(rv[(p % bs) * kSlotElems + i], float_to_bf16(s.v[p * kSlotElems + i]));
      }
    }
  }
}

// (b) Steps that start mid-block and cross a boundary, and a decode that fills a block.
TEST(Int4KiviCache, AttentionEqualsDequantizeThenAttend) {
  const int64_t bs = 32;
  auto cache = make_cache(int4_config(bs, 32));
  Seq a = make_seq(4 * bs + 3, 21), b = make_seq(3 * bs, 22);
  b.slot = 5;
  for (int32_t& id : b.table) id += kMaxBlocks;
  step(*cache, bs, {&a, &b}, {{0, 3 * bs + 5}, {0, 3 * bs - 1}});
  const std::vector<std::pair<int64_t, int64_t>> ranges{{3 * bs + 5, 4 * bs + 3},
                                                        {3 * bs - 1, 3 * bs}};
  // The expected context before this step's commit: blocks < start / B dequantized by the kv
  // reference and rotated by rope_ref; the rest the 16-bit values.
  const auto& c = int4(*cache);
  std::vector<std::vector<float>> ek, ev;  // per (seq, kv head): [seq_len, D]
  const std::vector<const Seq*> seqs{&a, &b};
  for (size_t s = 0; s < seqs.size(); ++s) {
    const int64_t start = ranges[s].first, len = ranges[s].second;
    for (int64_t g = 0; g < kKvHeads; ++g) {
      std::vector<float> k(len * kD), v(len * kD);
      for (int64_t i = 0; i < start / bs; ++i) {
        const auto blk = c.block(0, seqs[s]->table[i], g);
        std::span<float> kb(k.data() + i * bs * kD, bs * kD), vb(v.data() + i * bs * kD, bs * kD);
        kv::dequantize_keys_block_ref(c.layout(), blk, kb);
        kv::dequantize_values_block_ref(c.layout(), blk, vb);
        std::vector<int32_t> pos(bs);
        std::iota(pos.begin(), pos.end(), static_cast<int32_t>(i * bs));
        rope_ref(kb, kD, 1, kD, pos, inv_freq());
      }
      for (int64_t p = start / bs * bs; p < len; ++p) {
        for (int64_t i = 0; i < kD; ++i) {
          k[p * kD + i] = bf16(seqs[s]->k[p * kSlotElems + g * kD + i]);
          v[p * kD + i] = bf16(seqs[s]->v[p * kSlotElems + g * kD + i]);
        }
      }
      ek.push_back(std::move(k));
      ev.push_back(std::move(v));
    }
  }
  const Built built = build(bs, true, seqs, ranges);
  const auto expected = attend(
      built.builder.batch(),
      [&](int64_t s, int64_t g, int64_t b, int64_t e, float* k, float* v) {
        if (k != nullptr) std::copy_n(ek[s * kKvHeads + g].begin() + b * kD, (e - b) * kD, k);
        if (v != nullptr) std::copy_n(ev[s * kKvHeads + g].begin() + b * kD, (e - b) * kD, v);
        return RotatedValues{};
      },
      nullptr, 9);
  ThreadPool pool(2);
  const auto got = step(*cache, bs, seqs, ranges, &pool, 9);
  EXPECT_EQ(got, expected) << "int4 attention must equal dequantize-then-attend bit for bit";
}

// Every pool block of the sequence's table and its residual slot, as bytes.
std::vector<std::byte> snapshot(const CpuKvCache& cache, const Seq& s, int64_t len, int64_t bs) {
  const auto& c = dynamic_cast<const Int4KiviKvCache&>(cache);
  std::vector<std::byte> out;
  for (int64_t i = 0; i < len / bs; ++i) {
    for (int64_t g = 0; g < kKvHeads; ++g) {
      const auto blk = c.block(0, s.table[i], g);
      out.insert(out.end(), blk.begin(), blk.end());
    }
  }
  for (const auto r : {c.residual_k(0, s.slot), c.residual_v(0, s.slot)}) {
    const auto* bytes = reinterpret_cast<const std::byte*>(r.data());
    out.insert(out.end(), bytes, bytes + (len % bs) * kSlotElems * 2);
  }
  return out;
}

// (d) How a block was filled does not matter; (f) nor which block ids and slot hold it.
TEST(Int4KiviCache, FillOrderBlockIdsAndSlotsChangeNothing) {
  const int64_t bs = 32, len = 3 * bs + 11;
  Seq s = make_seq(len, 31);
  const auto run = [&](const Seq& seq, int64_t chunk, ThreadPool* pool,
                       std::vector<std::vector<float>>* outs) {
    auto cache = make_cache(int4_config(bs, 128));
    for (int64_t begin = 0; begin < len; begin += chunk) {
      const auto out = step(*cache, bs, {&seq}, {{begin, std::min(len, begin + chunk)}}, pool,
                            static_cast<uint32_t>(begin));
      if (outs) outs->push_back(out);
    }
    return snapshot(*cache, seq, len, bs);
  };
  ThreadPool pool(2);
  const auto one = run(s, len, nullptr, nullptr);
  std::vector<std::vector<float>> outs_identity, outs_shuffled;
  EXPECT_EQ(run(s, 7, nullptr, &outs_identity), one) << "chunks of 7";
  EXPECT_EQ(run(s, 1, &pool, nullptr), one) << "token by token";
  EXPECT_EQ(run(s, bs, nullptr, nullptr), one) << "whole blocks";

  Seq shuffled = s;
  std::vector<int32_t> perm(2 * kMaxBlocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(4));
  std::copy_n(perm.begin(), kMaxBlocks, shuffled.table.begin());
  shuffled.slot = 6;
  EXPECT_EQ(run(shuffled, 7, &pool, &outs_shuffled), one) << "shuffled block ids and slot";
  EXPECT_EQ(outs_shuffled, outs_identity) << "attention must not see block ids or slots";
}

TEST(Fp8Cache, AttentionReadsFp8OfThe16BitValues) {
  const int64_t bs = 16;
  KvCacheConfig config{2 * kMaxBlocks, bs, kv::KvCacheDtype::kFp8E4M3};
  auto cache = make_cache(config);
  Seq s = make_seq(40, 41);
  for (int32_t& id : s.table) id = 2 * kMaxBlocks - 1 - id;
  step(*cache, bs, {&s}, {{0, 25}});
  const std::vector<std::pair<int64_t, int64_t>> ranges{{25, 40}};
  const Built built = build(bs, false, {&s}, ranges);
  const auto fp8 = [](float x) { return kv::fp8_e4m3_to_float(kv::float_to_fp8_e4m3(bf16(x))); };
  const auto expected = attend(
      built.builder.batch(),
      [&](int64_t, int64_t g, int64_t b, int64_t e, float* k, float* v) {
        for (int64_t p = b; p < e; ++p) {
          for (int64_t i = 0; i < kD; ++i) {
            if (k != nullptr) k[(p - b) * kD + i] = fp8(s.k[p * kSlotElems + g * kD + i]);
            if (v != nullptr) v[(p - b) * kD + i] = fp8(s.v[p * kSlotElems + g * kD + i]);
          }
        }
        return RotatedValues{};
      },
      nullptr, 3);
  EXPECT_EQ(step(*cache, bs, {&s}, ranges, nullptr, 3), expected);
}

TEST(CpuKvCache, RefusesBadInt4Layouts) {
  KvCacheConfig c = int4_config(48);
  EXPECT_FALSE(make_cpu_kv_cache(c, {1, kKvHeads, kD, DType::kBF16}, inv_freq()).is_ok());
  c = int4_config(64, 96);
  EXPECT_FALSE(make_cpu_kv_cache(c, {1, kKvHeads, kD, DType::kBF16}, inv_freq()).is_ok());
  c = int4_config(64);
  c.num_seats = 0;
  EXPECT_FALSE(make_cpu_kv_cache(c, {1, kKvHeads, kD, DType::kBF16}, inv_freq()).is_ok());
}

// ---- int4_kivi v2 sink blocks and the Hadamard-values candidate ----

// A cache with two sink blocks (ids num_blocks, num_blocks + 1) when variant.sink_blocks > 0,
// and the variant's window and Hadamard values.
std::unique_ptr<CpuKvCache> make_cache(KvCacheConfig c, kv::Int4KiviVariant variant) {
  c.num_sink_blocks = variant.sink_blocks > 0 ? 2 : 0;
  c.num_window_blocks = variant.window_blocks;
  c.int4_value_hadamard = variant.value_hadamard;
  return make_cache(c);
}

// The sequence with its first block moved to sink block `sink` (0 or 1) of a cache `c`.
Seq with_sink(Seq s, const KvCacheConfig& c, int32_t sink = 1) {
  s.table[0] = static_cast<int32_t>(c.num_blocks) + sink;
  return s;
}

// What attention reads at the decode step that brings s to len tokens (all earlier tokens in one
// prefill step), per kv head; `then` runs on the step's batch before its commit.
struct Read {
  std::vector<std::vector<float>> k, v;  // per kv head [len, D]
  std::vector<RotatedValues> rot;
};
Read read_at(CpuKvCache& cache, int64_t bs, const Seq& s, int64_t len,
             const std::function<void(const ForwardBatch&)>& then = {}) {
  step(cache, bs, {&s}, {{0, len - 1}});
  const Built built = build(bs, true, {&s}, {{len - 1, len}});
  const ForwardBatch batch = built.builder.batch();
  cache.begin_step(batch);
  cache.write(0, batch, built.k, built.v, kSlotElems);
  Read r;
  for (int64_t g = 0; g < kKvHeads; ++g) {
    r.k.emplace_back(len * kD);
    r.v.emplace_back(len * kD);
    r.rot.push_back(cache.gather(0, batch, 0, g, len, r.k.back().data(), r.v.back().data()));
  }
  if (then) then(batch);
  return r;
}

float input_at(const std::vector<float>& x, int64_t p, int64_t g, int64_t i) {
  return bf16(x[static_cast<size_t>(p * kSlotElems + g * kD + i)]);
}

// The sink variant keeps block 0 exactly 16-bit (even with a 30x outlier token in it, which the
// plain format must quantize) and changes nothing else: later blocks read the same bits.
TEST(Int4KiviVariants, SinkBlockStays16BitAndLaterBlocksAreUnchanged) {
  const int64_t bs = 32, len = 4 * bs + 5;
  Seq s = make_seq(len, 51);
  for (int64_t i = 0; i < kSlotElems; ++i) s.k[i] *= 30, s.v[i] *= 30;  // position 0: a sink
  auto plain = make_cache(int4_config(bs), {0, 0, false});
  auto sink = make_cache(int4_config(bs), {1, 0, false});
  const Seq ss = with_sink(s, int4_config(bs));
  const Read a = read_at(*plain, bs, s, len), b = read_at(*sink, bs, ss, len);
  int64_t plain_differs = 0;
  for (int64_t g = 0; g < kKvHeads; ++g) {
    EXPECT_EQ(b.rot[g].begin, b.rot[g].end);
    for (int64_t p = 0; p < bs; ++p) {
      for (int64_t i = 0; i < kD; ++i) {
        ASSERT_EQ(b.k[g][p * kD + i], input_at(s.k, p, g, i)) << p << " " << i;
        ASSERT_EQ(b.v[g][p * kD + i], input_at(s.v, p, g, i)) << p << " " << i;
        plain_differs += a.v[g][p * kD + i] != input_at(s.v, p, g, i);
      }
    }
    EXPECT_TRUE(std::equal(a.k[g].begin() + bs * kD, a.k[g].end(), b.k[g].begin() + bs * kD));
    EXPECT_TRUE(std::equal(a.v[g].begin() + bs * kD, a.v[g].end(), b.v[g].begin() + bs * kD));
    // Full blocks 1..3 are quantized into the pool; nothing else is written there.
    for (int32_t id = 0; id < kMaxBlocks; ++id) {
      const auto blk = int4(*sink).block(0, id, g);
      const bool zero =
          std::all_of(blk.begin(), blk.end(), [](std::byte x) { return x == std::byte{0}; });
      EXPECT_EQ(zero, id < 1 || id > 3) << "pool block " << id;
    }
  }
  EXPECT_GT(plain_differs, 0);
}

// Values with an outlier channel: the Hadamard variant quantizes H(v) (bytes as the kv reference
// gives them), gather leaves pool values rotated and says where, attention's one rotation back
// per head equals rotating every row back first, and the error after rotating back is smaller.
TEST(Int4KiviVariants, HadamardValuesQuantizedRotatedAndRotatedBackOnce) {
  const int64_t bs = 32, len = 3 * bs + 7, full = 3;
  Seq s = make_seq(len, 61);
  for (int64_t p = 0; p < len; ++p) {
    for (int64_t g = 0; g < kKvHeads; ++g) s.v[p * kSlotElems + g * kD + 5] += 40.0f;
  }
  const KvCacheConfig config = int4_config(bs, 64);
  const auto layout = kv::Int4KiviLayout::create(static_cast<int>(bs), kD, 64);
  ASSERT_TRUE(layout.is_ok());
  auto plain = make_cache(config), had = make_cache(config, {0, 0, true});
  auto both = make_cache(config, {1, 0, true});
  const Read a = read_at(*plain, bs, s, len), hs = read_at(*both, bs, with_sink(s, config), len);
  std::vector<float> out_once, out_rows;
  const Read h = read_at(*had, bs, s, len, [&](const ForwardBatch& batch) {
    const KvGatherFn once = [&](int64_t q, int64_t g, int64_t b, int64_t e, float* k, float* v) {
      return had->gather_range(0, batch, q, g, b, e, k, v);
    };
    const KvGatherFn rows = [&](int64_t q, int64_t g, int64_t b, int64_t e, float* k, float* v) {
      const RotatedValues r = had->gather_range(0, batch, q, g, b, e, k, v);
      for (int64_t p = r.begin; p < r.end && v != nullptr; ++p) {
        kv::hadamard_ref(std::span<float>(v + (p - b) * kD, kD));
      }
      return RotatedValues{};
    };
    out_once = attend(batch, once, nullptr, 5);
    out_rows = attend(batch, rows, nullptr, 5);
  });
  ASSERT_EQ(out_once.size(), out_rows.size());
  for (size_t i = 0; i < out_once.size(); ++i) ASSERT_NEAR(out_once[i], out_rows[i], 2e-5) << i;

  double err_plain = 0, err_had = 0;
  for (int64_t g = 0; g < kKvHeads; ++g) {
    EXPECT_EQ(h.rot[g].begin, 0);
    EXPECT_EQ(h.rot[g].end, full * bs);
    EXPECT_EQ(hs.rot[g].begin, bs);  // the sink block is 16-bit, not rotated
    EXPECT_EQ(hs.rot[g].end, full * bs);
    EXPECT_EQ(h.k[g], a.k[g]) << "keys are not touched";
    for (int64_t i = 0; i < full; ++i) {
      std::vector<float> rotated(bs * kD), expect(bs * kD);
      for (int64_t t = 0; t < bs; ++t) {
        for (int64_t c = 0; c < kD; ++c) rotated[t * kD + c] = input_at(s.v, i * bs + t, g, c);
        kv::hadamard_ref(std::span<float>(rotated.data() + t * kD, kD));
      }
      std::vector<std::byte> blk(layout->block_bytes);
      kv::quantize_values_block_ref(*layout, rotated, blk);
      kv::dequantize_values_block_ref(*layout, blk, expect);
      EXPECT_TRUE(std::equal(expect.begin(), expect.end(), h.v[g].begin() + i * bs * kD));
      if (i > 0) {
        EXPECT_TRUE(std::equal(expect.begin(), expect.end(), hs.v[g].begin() + i * bs * kD));
      }
    }
    for (int64_t p = 0; p < len; ++p) {
      std::vector<float> back(h.v[g].begin() + p * kD, h.v[g].begin() + (p + 1) * kD);
      if (p < full * bs) kv::hadamard_ref(back);
      for (int64_t c = 0; c < kD; ++c) {
        const double x = input_at(s.v, p, g, c);
        err_plain += (a.v[g][p * kD + c] - x) * (a.v[g][p * kD + c] - x);
        err_had += (back[c] - x) * (back[c] - x);
        if (p < bs) {
          EXPECT_EQ(hs.v[g][p * kD + c], x);
        }
      }
    }
  }
  EXPECT_LT(std::sqrt(err_had), 0.6 * std::sqrt(err_plain));
}

// The window (format v2): the last full block is read 16-bit from the slot, exactly the
// input, while its pool bytes are written as in v1 and older blocks are read as in v1. A
// sequence that took its slot after a prefix-cache hit (seat_start) reads its last cached
// block from the pool, never from what an earlier owner left in the slot.
TEST(Int4KiviVariants, WindowBlockIs16BitOnlyWhereTheSlotHoldsIt) {
  const int64_t bs = 32, len = 3 * bs + 5;
  const KvCacheConfig config = int4_config(bs);
  const Seq s = make_seq(len, 71);
  auto plain = make_cache(config, {0, 0, false});
  auto window = make_cache(config, {0, 1, false});
  const Read a = read_at(*plain, bs, s, len), w = read_at(*window, bs, s, len);
  int64_t plain_differs = 0;
  for (int64_t g = 0; g < kKvHeads; ++g) {
    EXPECT_TRUE(std::equal(a.k[g].begin(), a.k[g].begin() + 2 * bs * kD, w.k[g].begin()));
    EXPECT_TRUE(std::equal(a.v[g].begin(), a.v[g].begin() + 2 * bs * kD, w.v[g].begin()));
    for (int64_t p = 2 * bs; p < 3 * bs; ++p) {
      for (int64_t i = 0; i < kD; ++i) {
        ASSERT_EQ(w.k[g][p * kD + i], input_at(s.k, p, g, i)) << p << " " << i;
        ASSERT_EQ(w.v[g][p * kD + i], input_at(s.v, p, g, i)) << p << " " << i;
        plain_differs += a.v[g][p * kD + i] != w.v[g][p * kD + i];
      }
    }
    for (int32_t id = 0; id < 3; ++id) {  // the pool bytes are v1's
      const auto x = int4(*plain).block(0, s.table[id], g),
                 y = int4(*window).block(0, s.table[id], g);
      EXPECT_TRUE(std::equal(x.begin(), x.end(), y.begin())) << id;
    }
  }
  EXPECT_GT(plain_differs, 0);

  // Slot 5 first holds another sequence (other blocks) of the same length, then a sequence
  // that hit s's first 3 blocks in the prefix cache and computes the rest.
  Seq other = make_seq(len, 72);
  other.slot = 5;
  for (int32_t& id : other.table) id += kMaxBlocks;
  read_at(*window, bs, other, len);
  Seq hit = s;
  hit.slot = 5;
  hit.seat_start = 3 * bs;
  const Built built = build(bs, true, {&hit}, {{3 * bs, len}});
  const ForwardBatch batch = built.builder.batch();
  window->begin_step(batch);
  window->write(0, batch, built.k, built.v, kSlotElems);
  for (int64_t g = 0; g < kKvHeads; ++g) {
    std::vector<float> k(len * kD), v(len * kD);
    window->gather(0, batch, 0, g, len, k.data(), v.data());
    EXPECT_TRUE(std::equal(a.k[g].begin(), a.k[g].begin() + 3 * bs * kD, k.begin())) << g;
    EXPECT_TRUE(std::equal(a.v[g].begin(), a.v[g].begin() + 3 * bs * kD, v.begin())) << g;
  }
}

TEST(Int4KiviVariants, RefusedWithOtherDtypesAndOutOfRange) {
  const CpuKvCacheShape shape{1, kKvHeads, kD, DType::kBF16};
  KvCacheConfig fp8{2 * kMaxBlocks, 16, kv::KvCacheDtype::kFp8E4M3};
  fp8.num_sink_blocks = 1;
  EXPECT_FALSE(make_cpu_kv_cache(fp8, shape, inv_freq()).is_ok());
  fp8.num_sink_blocks = 0;
  fp8.int4_value_hadamard = true;
  EXPECT_FALSE(make_cpu_kv_cache(fp8, shape, inv_freq()).is_ok());
  KvCacheConfig c = int4_config(32);
  c.num_sink_blocks = -1;
  EXPECT_FALSE(make_cpu_kv_cache(c, shape, inv_freq()).is_ok());
  c.num_sink_blocks = 3;
  c.int4_value_hadamard = true;
  EXPECT_TRUE(make_cpu_kv_cache(c, shape, inv_freq()).is_ok());
}

}  // namespace
}  // namespace s4kv::backend::cpu
