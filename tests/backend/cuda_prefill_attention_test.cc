// The tensor-core prefill kernels (prefill_attention.cuh) against the exact reference kernel
// (launch_paged_attention, itself held to the CPU reference by cuda_attention_test.cc), on the
// same device bytes: random caches of every format (16-bit bf16 / fp16, fp8_e4m3, int4_kivi v1
// and v2 and their parts: sink block, window block, Hadamard values; B 16..128, Gv 32..128),
// head shapes 28/4, 32/8, 8/8, and batches that mix prefills from position 0, chunks that start
// mid-block (earlier positions in the residual ring), at a block boundary after a prefix hit
// (window block from the pool or the ring), tiny chunks and decode rows, contexts up to ~2,000.
//
// The queries are aimed: most rows put almost all their weight on one chosen position (their
// own, the next one, which the causal mask must hide, or a random earlier one from any part of
// the cache), so a wrong key or value at any position, a mask off by one or a row read from the
// wrong place moves the row by O(1); the rest are plain random rows (diffuse weights). Every
// row a tile covers must agree with the reference within relative L2 <= 4e-3 where the
// operands and output are fp16 (16-bit fp16 cache, fp8, int4_kivi over fp16), <= 2e-2 where
// bf16 takes part (the decode kernels' bounds); rows no tile covers must stay unwritten (the
// output starts as NaN), and they must be exactly the rows prefill_covers says. The test checks
// its own power: the reference's rows differ from their neighbours (what a one-row slip of a
// tile would give) by far more than the bound. Measured on the H200 (build of 6b3ec17,
// bench/results/cuda_h200/backend_cuda_test.txt): at most 9.4e-4 with fp16 operands and output,
// 7.5e-3 where bf16 takes part; neighbouring rows differ by >= 1.0 at the 10th percentile.
// The plan itself (plan_prefill, prefill_covers, remove_prefill_rows) is host code, tested
// here without a device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cpu/rope.h"
#include "backend/cuda/device.h"
#include "backend/cuda/paged_attention.cuh"
#include "backend/cuda/prefill_attention.cuh"
#include "backend/forward_batch_builder.h"
#include "backend/rope_table.h"
#include "common/half.h"
#include "kv/fp8_e4m3.h"
#include "kv/int4_kivi_layout.h"
#include "random_batch.h"

namespace s4kv::backend::cuda {
namespace {

constexpr int kD = 128;
constexpr int kMaxContext = 2100;
constexpr int kMaxSeqs = 8;

// ---- the plan (host) --------------------------------------------------------------------------

TEST(PrefillPlan, TilesCoverEachLongRowOnce) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t B = 16 << (trial % 4);
    ForwardBatchBuilder builder = random_prefill_rows(rng, B, 1 + trial % 9, 3000, 1, 400, 3);
    const ForwardBatch b = builder.batch();
    for (const int min_q_len : {1, 2, 65}) {
      SCOPED_TRACE(testing::Message() << "trial " << trial << " min_q_len " << min_q_len);
      std::vector<PrefillTile> tiles;
      plan_prefill(b, min_q_len, tiles);
      std::vector<int> covered(static_cast<size_t>(b.num_tokens()), 0);
      int32_t last_context = INT32_MAX;
      for (const PrefillTile& t : tiles) {
        ASSERT_GE(t.seq, 0);
        ASSERT_LT(t.seq, b.num_seqs());
        ASSERT_GE(t.q_begin, b.query_start_loc[t.seq]);
        ASSERT_LE(t.q_end, b.query_start_loc[t.seq + 1]);
        ASSERT_LT(t.q_begin, t.q_end);
        ASSERT_LE(t.q_end - t.q_begin, kPrefillTileRows);
        const int32_t context = b.seq_lens[t.seq] - (b.query_start_loc[t.seq + 1] - t.q_end);
        ASSERT_LE(context, last_context) << "heaviest tiles first";
        last_context = context;
        for (int32_t r = t.q_begin; r < t.q_end; ++r) ++covered[static_cast<size_t>(r)];
      }
      std::vector<int32_t> all(static_cast<size_t>(b.num_tokens())), left;
      std::iota(all.begin(), all.end(), 0);
      for (int32_t r = 0; r < b.num_tokens(); ++r) {
        const bool expect = prefill_covers(b, min_q_len, r);
        ASSERT_EQ(covered[static_cast<size_t>(r)], expect ? 1 : 0) << "row " << r;
        if (!expect) left.push_back(r);
      }
      remove_prefill_rows(b, min_q_len, all);
      ASSERT_EQ(all, left);
    }
  }
}

// ---- the kernels against the reference ---------------------------------------------------------

struct Format {
  const char* name;
  kv::KvCacheDtype dtype;
  int block_size;
  int gv = 128;
  bool sink = false, window = false, hadamard = false;
  bool bf16 = true;  // the 16-bit type of the cache's 16-bit parts (fp8: fp16 operands anyway)
  DType out = DType::kBF16;
};

constexpr auto k16 = kv::KvCacheDtype::k16Bit;
constexpr auto kFp8 = kv::KvCacheDtype::kFp8E4M3;
constexpr auto kInt4 = kv::KvCacheDtype::kInt4Kivi;
constexpr Format kFormats[] = {
    {"bf16_b16", k16, 16},
    {"f16_b64", k16, 64, 128, false, false, false, false, DType::kF16},
    {"bf16_b128", k16, 128},
    {"fp8_b32", kFp8, 32, 128, false, false, false, false, DType::kF16},
    {"fp8_b64_bf16out", kFp8, 64},
    {"int4_v2_b32_gv32", kInt4, 32, 32, true, true, true},
    {"int4_v2_b64_gv128", kInt4, 64, 128, true, true, true},
    {"int4_v2_b128_gv64_f16", kInt4, 128, 64, true, true, true, false, DType::kF16},
    {"int4_v1_b32_gv64_f16", kInt4, 32, 64, false, false, false, false, DType::kF16},
    {"int4_v1_b64_gv128", kInt4, 64, 128},
    {"int4_v1_b128_gv32", kInt4, 128, 32},
    {"int4_sink_had_b64_gv64_f16", kInt4, 64, 64, true, false, true, false, DType::kF16},
    {"int4_window_b32_gv128", kInt4, 32, 128, false, true, false},
    {"int4_sink_window_b128_f16", kInt4, 128, 128, true, true, false, false, DType::kF16},
};

struct Heads {
  int heads, kv_heads;
};
constexpr Heads kHeadShapes[] = {{28, 4}, {32, 8}, {8, 8}};

// Normal(0, 1) draws from a table, indexed by a xorshift generator (the caches hold tens of
// millions of values).
class Normals {
 public:
  explicit Normals(uint64_t seed) : x_(seed * 0x9e3779b97f4a7c15ull | 1) {
    static const std::vector<float> table = [] {
      std::mt19937 rng(17);
      std::normal_distribution<float> d(0.0f, 1.0f);
      std::vector<float> t(1 << 16);
      for (float& v : t) v = d(rng);
      return t;
    }();
    table_ = table.data();
  }
  uint32_t bits() {
    x_ ^= x_ << 13;
    x_ ^= x_ >> 7;
    x_ ^= x_ << 17;
    return static_cast<uint32_t>(x_ >> 16);
  }
  float operator()() { return table_[bits() & 0xffffu]; }

 private:
  uint64_t x_;
  const float* table_;
};

template <typename T>
DeviceBuffer upload(const std::vector<T>& v) {
  DeviceBuffer b(std::max<size_t>(v.size() * sizeof(T), 16));
  if (!v.empty()) b.copy_from_host(v.data(), v.size() * sizeof(T));
  return b;
}
template <typename T>
DeviceBuffer upload(std::span<const T> v) {
  return upload(std::vector<T>(v.begin(), v.end()));
}

// The caches of one test: bytes on the host (to aim queries) and their device copies.
struct Caches {
  Format f;
  int kv_heads = 0;
  int64_t kv_dim = 0, num_blocks = 0;
  int ring = 1;
  kv::Int4KiviLayout layout;
  std::vector<uint16_t> k16, v16;   // 16-bit cache [num_blocks, B, kv_dim]
  std::vector<uint8_t> k8, v8;      // fp8 cache, same shape
  std::vector<std::byte> pool;      // int4_kivi [num_blocks, kv_heads, block_bytes]
  std::vector<uint16_t> sink, res;  // [kMaxSeqs + 1, 2, B | ring B, kv_dim]
  DeviceBuffer dk, dv, dpool, dsink, dres;

  float widen(uint16_t h) const { return f.bf16 ? bf16_to_float(h) : fp16_to_float(h); }
  uint16_t narrow(float x) const { return f.bf16 ? float_to_bf16(x) : float_to_fp16(x); }
};

void make_caches(const Format& f, int kv_heads, Normals& rnd, Caches& c) {
  const int64_t B = f.block_size;
  c.f = f;
  c.kv_heads = kv_heads;
  c.kv_dim = int64_t{kv_heads} * kD;
  c.num_blocks = kMaxSeqs * (kMaxContext / B + 1) + 7;
  c.ring = f.window ? 2 : 1;
  const size_t rows = static_cast<size_t>(c.num_blocks * B * c.kv_dim);
  if (f.dtype == k16) {
    c.k16.resize(rows);
    c.v16.resize(rows);
    for (size_t i = 0; i < rows; ++i) {
      c.k16[i] = c.narrow(rnd());
      c.v16[i] = c.narrow(rnd());
    }
    c.dk = upload(c.k16);
    c.dv = upload(c.v16);
    return;
  }
  if (f.dtype == kFp8) {
    c.k8.resize(rows);
    c.v8.resize(rows);
    for (size_t i = 0; i < rows; ++i) {
      c.k8[i] = kv::float_to_fp8_e4m3(rnd());
      c.v8[i] = kv::float_to_fp8_e4m3(rnd());
    }
    c.dk = upload(c.k8);
    c.dv = upload(c.v8);
    return;
  }
  c.layout = *kv::Int4KiviLayout::create(f.block_size, kD, f.gv);
  const kv::Int4KiviLayout& L = c.layout;
  c.pool.resize(static_cast<size_t>(c.num_blocks * kv_heads) * L.block_bytes);
  // Random codes; scales about 0.2 and zeros about -7.5 scales, so values are roughly uniform
  // in (-1.5, 1.5) around 0.
  for (size_t blk = 0; blk < static_cast<size_t>(c.num_blocks * kv_heads); ++blk) {
    std::byte* base = c.pool.data() + blk * L.block_bytes;
    for (size_t i = 0; i < L.codes_bytes; i += 4) {
      const uint32_t kw = rnd.bits(), vw = rnd.bits();
      std::memcpy(base + L.k_codes_offset + i, &kw, 4);
      std::memcpy(base + L.v_codes_offset + i, &vw, 4);
    }
    auto params = [&](size_t scale_off, size_t zero_off, size_t n) {
      for (size_t i = 0; i < n; ++i) {
        const float s = 0.2f + 0.03f * rnd();
        const uint16_t sh = float_to_fp16(s), zh = float_to_fp16(-7.5f * s + 0.2f * rnd());
        std::memcpy(base + scale_off + 2 * i, &sh, 2);
        std::memcpy(base + zero_off + 2 * i, &zh, 2);
      }
    };
    params(L.k_scale_offset, L.k_zero_offset, kD);
    params(L.v_scale_offset, L.v_zero_offset, static_cast<size_t>(B * L.num_value_groups()));
  }
  c.sink.resize(static_cast<size_t>((kMaxSeqs + 1) * 2 * B * c.kv_dim));
  c.res.resize(static_cast<size_t>((kMaxSeqs + 1) * 2 * c.ring * B * c.kv_dim));
  for (uint16_t& x : c.sink) x = c.narrow(rnd());
  for (uint16_t& x : c.res) x = c.narrow(rnd());
  c.dpool = upload(c.pool);
  c.dsink = upload(c.sink);
  c.dres = upload(c.res);
}

struct SeqSpec {
  int start, q_len, seat_start;
};

struct Stats {
  double max_rel = 0;
  int64_t rows = 0, tiles = 0, power_rows = 0, split_tiles = 0;
  int64_t pool_row_runs = 0;          // int4_kivi launches with pool rows (launch_int4_pool_rows)
  int64_t partial_pool_row_runs = 0;  // ... with a sequence's pool partly in rows
  std::vector<double> neighbour;      // the reference's row vs the next row of the sequence
};

double rel_l2(const float* got, const float* ref) {
  double num = 0, den = 0;
  for (int c = 0; c < kD; ++c) {
    num += (double{got[c]} - ref[c]) * (double{got[c]} - ref[c]);
    den += double{ref[c]} * ref[c];
  }
  return std::sqrt(num / den);  // NaN where got is NaN (an unwritten row)
}

// One batch: the reference on every row, then the prefill kernels on the tiles of
// plan_prefill(min_q_len) for min_q_len 2 (decode rows left out) and 1 (every row), and for 2
// with split_prefill's split contexts over a wave large enough to split every tile it may
// (kPrefillSplitSlots slots, heaviest tiles first).
void run_batch(Caches& c, const Heads& hs, const std::vector<SeqSpec>& specs, Normals& rnd,
               std::mt19937& rng, const RopeTable& rope, const DeviceBuffer& dcos,
               const DeviceBuffer& dsin, const DeviceBuffer& drows, Stats& stats) {
  const Format& f = c.f;
  const int B = f.block_size;
  const bool int4 = f.dtype == kInt4, fp8 = f.dtype == kFp8;
  const int64_t max_blocks = kMaxContext / B + 1;
  // Distinct pool blocks for all sequences, in random order.
  std::vector<int32_t> ids(static_cast<size_t>(c.num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  ForwardBatchBuilder builder(B, max_blocks);
  size_t next_id = 0;
  for (size_t s = 0; s < specs.size(); ++s) {
    const SeqSpec& sp = specs[s];
    const int len = sp.start + sp.q_len;
    ASSERT_LE(len, kMaxContext);
    std::vector<int32_t> table(static_cast<size_t>((len + B - 1) / B));
    for (int32_t& id : table) id = ids[next_id++];
    if (int4 && f.sink) table[0] = static_cast<int32_t>(c.num_blocks + static_cast<int64_t>(s));
    const std::vector<int32_t> tokens(static_cast<size_t>(sp.q_len), 0);
    builder.add(tokens, sp.start, table, int4 ? static_cast<int32_t>(s) : -1, sp.seat_start);
  }
  const ForwardBatch b = builder.batch();
  const int64_t n = b.num_tokens(), kv_dim = c.kv_dim;
  const int group = hs.heads / hs.kv_heads;
  const int64_t q_stride = int64_t{hs.heads + 2 * hs.kv_heads} * kD;  // as in the qkv rows
  std::vector<int32_t> token_seq(static_cast<size_t>(n)), pool_ends;
  for (int64_t s = 0; s < b.num_seqs(); ++s) {
    for (int32_t t = b.query_start_loc[s]; t < b.query_start_loc[s + 1]; ++t) {
      token_seq[static_cast<size_t>(t)] = static_cast<int32_t>(s);
    }
    if (int4) {
      pool_ends.push_back(static_cast<int32_t>(int4_pool_end(b, s, B, c.ring, c.num_blocks)));
    }
  }
  std::vector<uint16_t> stage_k, stage_v;
  if (int4) {
    stage_k.resize(static_cast<size_t>(n * kv_dim));
    stage_v.resize(stage_k.size());
    for (size_t i = 0; i < stage_k.size(); ++i) {
      stage_k[i] = c.narrow(rnd());
      stage_v[i] = c.narrow(rnd());
    }
  }

  // The key of kv head g at position p of sequence s, where the reference reads it (load_kv).
  auto key_at = [&](int64_t s, int g, int p, std::array<float, kD>& k) {
    const int32_t* table = b.block_tables.data() + s * b.max_num_blocks_per_seq;
    const int blk = p / B,
              start = b.seq_lens[s] - (b.query_start_loc[s + 1] - b.query_start_loc[s]);
    if (!int4) {
      const size_t row = static_cast<size_t>((int64_t{table[blk]} * B + p % B) * kv_dim + g * kD);
      for (int i = 0; i < kD; ++i) {
        k[static_cast<size_t>(i)] = fp8 ? kv::fp8_e4m3_to_float(c.k8[row + static_cast<size_t>(i)])
                                        : c.widen(c.k16[row + static_cast<size_t>(i)]);
      }
      return;
    }
    const uint16_t* rows = nullptr;
    if (blk < pool_ends[static_cast<size_t>(s)]) {
      if (table[blk] >= c.num_blocks) {
        rows = c.sink.data() + ((int64_t{table[blk]} - c.num_blocks) * 2 * B + p % B) * kv_dim;
      } else {
        const kv::Int4KiviLayout& L = c.layout;
        const std::byte* base = c.pool.data() + (int64_t{table[blk]} * c.kv_heads + g) *
                                                    static_cast<int64_t>(L.block_bytes);
        const std::span<const std::byte> codes(base + L.k_codes_offset, L.codes_bytes);
        float x[kD];
        for (int i = 0; i < kD; ++i) {
          const float sc = fp16_to_float(kv::read_fp16({base + L.k_scale_offset, 2 * kD}, i));
          const float z = fp16_to_float(kv::read_fp16({base + L.k_zero_offset, 2 * kD}, i));
          x[i] = static_cast<float>(kv::read_int4_code(codes, kD, p % B, i)) * sc + z;
        }
        rope_rotate(x, k.data(), rope.cos(p), rope.sin(p), kD);
        return;
      }
    } else if (p < start) {
      rows = c.res.data() +
             (static_cast<int64_t>(b.seats[s]) * 2 * c.ring * B + (p / B % c.ring) * B + p % B) *
                 kv_dim;
    } else {
      rows = stage_k.data() + (b.query_start_loc[s] + p - start) * kv_dim;
    }
    for (int i = 0; i < kD; ++i) k[static_cast<size_t>(i)] = c.widen(rows[g * kD + i]);
  };

  // Queries: row mode 0 random; 1 aimed at the row's own position; 2 at the next position
  // (masked: it must get no weight); 3 at a random earlier position.
  std::vector<float> q(static_cast<size_t>(n * q_stride), 0.0f);
  for (int64_t t = 0; t < n; ++t) {
    const int64_t s = token_seq[static_cast<size_t>(t)];
    const int pos = b.positions[t];
    for (int h = 0; h < hs.heads; ++h) {
      float* row = q.data() + t * q_stride + h * kD;
      const int mode = static_cast<int>((t * 3 + h) % 4);
      for (int i = 0; i < kD; ++i) row[i] = (mode == 0 ? 1.0f : 0.3f) * rnd();
      if (mode == 0) continue;
      int target = pos;
      if (mode == 2 && pos + 1 < b.seq_lens[s]) target = pos + 1;
      if (mode == 3) target = std::uniform_int_distribution<int>(0, pos)(rng);
      std::array<float, kD> k;
      key_at(s, h / group, target, k);
      double kk = 0;
      for (float x : k) kk += double{x} * x;
      if (kk == 0) continue;
      // Score (q . k / sqrt(128)) of about 12 at the target, about N(0, 1) elsewhere.
      const auto alpha = static_cast<float>(12.0 * std::sqrt(double{kD}) / kk);
      for (int i = 0; i < kD; ++i) row[i] += alpha * k[static_cast<size_t>(i)];
    }
  }

  DeviceBuffer d_q = upload(q), d_token_seq = upload(token_seq), d_pos = upload(b.positions),
               d_qsl = upload(b.query_start_loc), d_lens = upload(b.seq_lens),
               d_tables = upload(b.block_tables), d_seats = upload(b.seats),
               d_starts = upload(b.seat_starts), d_pool_ends = upload(pool_ends),
               d_stage_k = upload(stage_k), d_stage_v = upload(stage_v);
  const size_t out_elems = static_cast<size_t>(n * hs.heads * kD);
  DeviceBuffer d_ref(out_elems * 4), d_out(out_elems * 2);

  PagedAttentionArgs a;
  a.q = static_cast<const float*>(d_q.data());
  a.q_stride = q_stride;
  a.num_tokens = n;
  a.num_heads = hs.heads;
  a.num_kv_heads = hs.kv_heads;
  a.block_size = B;
  a.scale = 1.0f / std::sqrt(float{kD});
  a.token_seq = static_cast<const int32_t*>(d_token_seq.data());
  a.positions = static_cast<const int32_t*>(d_pos.data());
  a.query_start_loc = static_cast<const int32_t*>(d_qsl.data());
  a.seq_lens = static_cast<const int32_t*>(d_lens.data());
  a.block_tables = static_cast<const int32_t*>(d_tables.data());
  a.max_blocks_per_seq = b.max_num_blocks_per_seq;
  a.cache = f.dtype;
  a.bf16 = f.bf16;
  if (int4) {
    a.pool = static_cast<const std::byte*>(c.dpool.data());
    a.layout = c.layout;
    a.num_pool_blocks = c.num_blocks;
    a.residual = static_cast<const uint16_t*>(c.dres.data());
    a.seat_stride = 2 * c.ring * B * c.kv_dim;  // packed rings (c.res)
    a.ring = c.ring;
    a.sink = static_cast<const uint16_t*>(c.dsink.data());
    a.staging_k = static_cast<const uint16_t*>(d_stage_k.data());
    a.staging_v = static_cast<const uint16_t*>(d_stage_v.data());
    a.seats = static_cast<const int32_t*>(d_seats.data());
    a.seat_starts = static_cast<const int32_t*>(d_starts.data());
    a.pool_ends = static_cast<const int32_t*>(d_pool_ends.data());
    a.rope_cos = static_cast<const float*>(dcos.data());
    a.rope_sin = static_cast<const float*>(dsin.data());
    a.rope_f16 = static_cast<const uint16_t*>(drows.data());
    a.value_hadamard = f.hadamard;
  } else {
    a.k_cache = c.dk.data();
    a.v_cache = c.dv.data();
  }

  // The reference, fp32 out, every row.
  std::vector<float> ref(out_elems);
  {
    PagedAttentionArgs r = a;
    r.out = d_ref.data();
    r.out_dtype = DType::kF32;
    launch_paged_attention(r, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    d_ref.copy_to_host(ref.data(), out_elems * 4);
  }
  // The test's power: a tile shifted by one row would compare each row with its neighbour.
  for (int64_t s = 0; s < b.num_seqs(); ++s) {
    for (int32_t t = b.query_start_loc[s]; t + 1 < b.query_start_loc[s + 1]; ++t) {
      for (int h = 0; h < hs.heads; ++h) {
        stats.neighbour.push_back(rel_l2(ref.data() + (int64_t{t} * hs.heads + h) * kD,
                                         ref.data() + (int64_t{t + 1} * hs.heads + h) * kD));
      }
    }
  }

  a.out_dtype = f.out;
  a.out = d_out.data();
  const double bound = f.bf16 && !fp8 ? 2e-2 : f.out == DType::kBF16 ? 2e-2 : 4e-3;
  ASSERT_TRUE(prefill_kernels_support(hs.heads, hs.kv_heads, a));
  DeviceBuffer d_partials(static_cast<size_t>(prefill_split_partial_floats(hs.heads) * 4));
  for (const auto& [min_q_len, split] :
       {std::pair{2, false}, std::pair{1, false}, std::pair{2, true}}) {
    SCOPED_TRACE(testing::Message() << "min_q_len " << min_q_len << (split ? " split" : ""));
    std::vector<PrefillTile> tiles;
    plan_prefill(b, min_q_len, tiles);
    std::vector<PrefillMerge> merges;
    if (split) split_prefill(b, hs.heads, int64_t{1} << 30, tiles, merges);
    DeviceBuffer d_tiles = upload(tiles);
    DeviceBuffer d_merges = upload(merges);
    const PrefillSplitLaunch sl{static_cast<float*>(d_partials.data()),
                                static_cast<const PrefillMerge*>(d_merges.data()),
                                static_cast<int32_t>(merges.size())};
    stats.split_tiles += static_cast<int64_t>(merges.size());
    ASSERT_EQ(cudaMemset(d_out.data(), 0xff, out_elems * 2), cudaSuccess);  // NaN in bf16, fp16
    launch_prefill_attention(a, static_cast<const PrefillTile*>(d_tiles.data()),
                             static_cast<int32_t>(tiles.size()), nullptr, &sl);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<uint16_t> bits(out_elems);
    d_out.copy_to_host(bits.data(), out_elems * 2);
    std::vector<float> got(out_elems);
    for (size_t i = 0; i < out_elems; ++i) {
      got[i] = f.out == DType::kBF16 ? bf16_to_float(bits[i]) : fp16_to_float(bits[i]);
    }
    std::vector<int> covered(static_cast<size_t>(n), 0);
    for (const PrefillTile& t : tiles) {  // a split tile's rows once, by its first part
      if (t.part != 0) continue;
      for (int32_t r = t.q_begin; r < t.q_end; ++r) ++covered[static_cast<size_t>(r)];
    }
    int failures = 0;
    for (int64_t t = 0; t < n; ++t) {
      const bool cov = prefill_covers(b, min_q_len, static_cast<int32_t>(t));
      ASSERT_EQ(covered[static_cast<size_t>(t)], cov ? 1 : 0) << "token " << t;
      for (int h = 0; h < hs.heads; ++h) {
        const size_t at = static_cast<size_t>((t * hs.heads + h) * kD);
        if (!cov) {  // left to the reference kernel: never written here
          for (int i = 0; i < kD; ++i) {
            ASSERT_TRUE(std::isnan(got[at + static_cast<size_t>(i)]))
                << "token " << t << " head " << h << " written but not covered";
          }
          continue;
        }
        const double rel = rel_l2(got.data() + at, ref.data() + at);
        if (!(rel <= bound) && ++failures <= 8) {
          const int64_t s = token_seq[static_cast<size_t>(t)];
          ADD_FAILURE() << "token " << t << " (sequence " << s << ", position " << b.positions[t]
                        << ", start " << specs[static_cast<size_t>(s)].start << ", q_len "
                        << specs[static_cast<size_t>(s)].q_len << ") head " << h << ": relative L2 "
                        << rel << " > " << bound;
        }
        stats.max_rel = std::max(stats.max_rel, std::isnan(rel) ? 1e9 : rel);
        ++stats.rows;
      }
    }
    ASSERT_EQ(failures, 0) << failures << " rows past the bound";
    stats.tiles += static_cast<int64_t>(tiles.size());
    // int4_kivi: the sequences' pool tiles made into pool rows first (launch_int4_pool_rows),
    // then the same launch: the same bits. Every pool in rows, then the rows cut in the middle
    // of the first pool of two tiles or more (its later tiles, and the pools after it,
    // dequantized by the prefill kernel).
    if (!int4) continue;
    Int4PoolRows all;
    plan_int4_pool_rows(b, tiles, pool_ends, c.num_blocks, B, INT32_MAX, all);
    if (all.seqs.empty()) continue;
    std::vector<int64_t> capacities = {all.rows};
    for (const int32_t s : all.seqs) {
      const int32_t n = all.tiles[static_cast<size_t>(s)];
      if (n < 2) continue;
      capacities.push_back(all.base[static_cast<size_t>(s)] + 64 * (n / 2));
      break;
    }
    DeviceBuffer rows_k(static_cast<size_t>(all.rows * kv_dim * 2)), rows_v(rows_k.bytes());
    for (const int64_t capacity : capacities) {
      SCOPED_TRACE(testing::Message() << "pool rows for " << capacity << " of " << all.rows);
      Int4PoolRows pr;
      plan_int4_pool_rows(b, tiles, pool_ends, c.num_blocks, B, capacity, pr);
      DeviceBuffer d_base = upload(pr.base), d_tiles_in_rows = upload(pr.tiles),
                   d_seqs = upload(pr.seqs);
      PagedAttentionArgs ar = a;
      ar.pool_rows_k = static_cast<uint16_t*>(rows_k.data());
      ar.pool_rows_v = static_cast<uint16_t*>(rows_v.data());
      ar.pool_row_base = static_cast<const int32_t*>(d_base.data());
      ar.pool_row_tiles = static_cast<const int32_t*>(d_tiles_in_rows.data());
      ASSERT_EQ(cudaMemset(rows_k.data(), 0xff, rows_k.bytes()), cudaSuccess);  // NaN: unmade
      ASSERT_EQ(cudaMemset(rows_v.data(), 0xff, rows_v.bytes()), cudaSuccess);
      ASSERT_EQ(cudaMemset(d_out.data(), 0xff, out_elems * 2), cudaSuccess);
      launch_int4_pool_rows(ar, static_cast<const int32_t*>(d_seqs.data()),
                            static_cast<int32_t>(pr.seqs.size()), pr.max_tiles, nullptr);
      launch_prefill_attention(ar, static_cast<const PrefillTile*>(d_tiles.data()),
                               static_cast<int32_t>(tiles.size()), nullptr, &sl);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<uint16_t> bits_rows(out_elems);
      d_out.copy_to_host(bits_rows.data(), out_elems * 2);
      EXPECT_TRUE(bits_rows == bits) << "outputs with pool rows differ from the kernel's own";
      ++(capacity == all.rows ? stats.pool_row_runs : stats.partial_pool_row_runs);
    }
  }
}

// Chunks that matter for each part of the context (B-dependent), then random batches.
std::vector<std::vector<SeqSpec>> batches_for(int B, std::mt19937& rng) {
  std::vector<std::vector<SeqSpec>> out;
  out.push_back({
      {0, 300, 0},                                 // a prompt from position 0
      {7 * B + 5, 150, 0},                         // a chunk from mid-block: the ring's tail
      {12 * B, 64, 10 * B},                        // block-aligned after a hit: window in ring
      {12 * B, 70, 12 * B},                        // hit up to the chunk: window block from pool
      {500, 1, 0},                                 // a decode row
      {40, 100, 0},                                // inside block 0 (B >= 64) or past it
      {2 * B - 3, 2, 0},                           // two rows across a block boundary
      {std::min(1800, kMaxContext - 200), 200, 0}  // a long context
  });
  for (int k = 0; k < 2; ++k) {
    std::uniform_int_distribution<int> start(0, 1700), q_len(2, 300), coin(0, 2);
    std::vector<SeqSpec> specs;
    for (int s = 0; s < 6; ++s) {
      SeqSpec sp{start(rng), s == 3 ? 1 : q_len(rng), 0};
      if (s == 5) sp.start = (k + 1) * B;  // block 0 (then 1) just filled: sink / window edges
      if (coin(rng) == 0) {
        sp.seat_start = std::uniform_int_distribution<int>(0, sp.start / B)(rng) * B;
      }
      specs.push_back(sp);
    }
    out.push_back(specs);
  }
  return out;
}

class CudaPrefillAttention : public ::testing::TestWithParam<std::tuple<Format, Heads>> {};

// split_prefill's device width: resident blocks a multiprocessor counted in blocks of one head,
// as they run on compute capability 9.x (64K registers, 228 KB of shared memory): 16-bit three,
// fp8 two, int4_kivi two (one block of two heads; two of one head with
// S4KV_PREFILL_HEAD_PAIRS=0). An occupancy query for the two-head kernel in blocks of 128
// threads, doubled, said four.
TEST(CudaPrefillOccupancy, BlocksPerMultiprocessorAsTheKernelsRun) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  if (prop.major != 9) GTEST_SKIP() << "figures for compute capability 9.x";
  EXPECT_EQ(prefill_blocks_per_sm(kv::KvCacheDtype::k16Bit), 3);
  EXPECT_EQ(prefill_blocks_per_sm(kv::KvCacheDtype::kFp8E4M3), 2);
  EXPECT_EQ(prefill_blocks_per_sm(kv::KvCacheDtype::kInt4Kivi), 2);
}

TEST_P(CudaPrefillAttention, MatchesTheReferenceKernel) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const auto& [f, hs] = GetParam();
  std::mt19937 rng(1234 + f.block_size + hs.heads);
  Normals rnd(static_cast<uint64_t>(f.block_size * 131 + f.gv + hs.kv_heads));
  RopeTable rope(cpu::rope_inv_freq(kD, 1000000.0, model::RopeScaling{}));
  rope.ensure(kMaxContext);
  const DeviceBuffer dcos = upload(rope.cos_table()), dsin = upload(rope.sin_table());
  const DeviceBuffer drows = upload(int4_prefill_rope_image(rope.cos_table(), rope.sin_table()));
  Caches c;
  make_caches(f, hs.kv_heads, rnd, c);
  Stats stats;
  const auto batches = batches_for(f.block_size, rng);
  for (size_t k = 0; k < batches.size(); ++k) {
    SCOPED_TRACE(testing::Message() << "batch " << k);
    run_batch(c, hs, batches[k], rnd, rng, rope, dcos, dsin, drows, stats);
    if (HasFatalFailure()) return;
  }
  std::vector<double>& nb = stats.neighbour;
  std::sort(nb.begin(), nb.end());
  const double median = nb[nb.size() / 2], tenth = nb[nb.size() / 10];
  std::printf(
      "[ prefill  ] %-28s %2d/%d  %lld tiles (%lld split)  %lld rows x heads  max rel L2 %.2e  "
      "neighbour rows differ by >= %.2f (10th percentile), %.2f (median)\n",
      f.name, hs.heads, hs.kv_heads, static_cast<long long>(stats.tiles),
      static_cast<long long>(stats.split_tiles), static_cast<long long>(stats.rows), stats.max_rel,
      tenth, median);
  // A one-row slip moves most rows far past the bound (so the comparison can fail).
  EXPECT_GT(tenth, 0.2);
  EXPECT_GT(stats.split_tiles, 0) << "no tile was split: the split path went untested";
  if (f.dtype == kInt4) {
    EXPECT_GT(stats.pool_row_runs, 0) << "no batch had pool rows to make";
    EXPECT_GT(stats.partial_pool_row_runs, 0) << "no batch had a pool of two tiles to cut";
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, CudaPrefillAttention,
                         ::testing::Combine(::testing::ValuesIn(kFormats),
                                            ::testing::ValuesIn(kHeadShapes)),
                         [](const auto& info) {
                           const Format& f = std::get<0>(info.param);
                           const Heads& h = std::get<1>(info.param);
                           return std::string(f.name) + "_h" + std::to_string(h.heads) + "_" +
                                  std::to_string(h.kv_heads);
                         });

}  // namespace
}  // namespace s4kv::backend::cuda
