// CPU reference ops against hand-computed values and independent naive implementations:
// RoPE (inv_freq for rope_type default and llama3, the rotation, the table and thread pool of
// the forward pass's rope against rope_ref), embed, SwiGLU, kv_write's
// rounding, and paged attention against dense attention on random data, with the block
// layout (shuffled block ids, several sequences, GQA) and threading shown not to matter.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/embed.h"
#include "backend/cpu/kv_write.h"
#include "backend/cpu/linear.h"
#include "backend/cpu/mlp.h"
#include "backend/cpu/paged_kv_cache.h"
#include "backend/cpu/rope.h"
#include "backend/cpu/thread_pool.h"
#include "common/half.h"
#include "kv/hadamard.h"

namespace s4kv::backend::cpu {
namespace {

std::vector<float> random_vector(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

TEST(RopeRef, DefaultInvFreqIsThetaPower) {
  const auto inv = rope_inv_freq(128, 10000.0, model::RopeScaling{});
  ASSERT_EQ(inv.size(), 64u);
  EXPECT_EQ(inv[0], 1.0f);
  for (size_t i = 0; i < inv.size(); ++i) {
    const double expected = 1.0 / std::pow(10000.0, 2.0 * static_cast<double>(i) / 128.0);
    EXPECT_NEAR(inv[i], expected, 2e-7 * expected) << i;
  }
}

TEST(RopeRef, Llama3InvFreqMatchesTheThreeBands) {
  model::RopeScaling s;
  s.llama3 = true;
  s.factor = 32.0;
  s.low_freq_factor = 1.0;
  s.high_freq_factor = 4.0;
  s.original_max_position_embeddings = 8192;
  const auto base = rope_inv_freq(128, 500000.0, model::RopeScaling{});
  const auto inv = rope_inv_freq(128, 500000.0, s);
  int high = 0, low = 0, medium = 0;
  for (size_t i = 0; i < inv.size(); ++i) {
    const double wavelen = 2.0 * M_PI / base[i];
    if (wavelen < 8192.0 / 4.0) {  // high frequencies: unchanged
      EXPECT_EQ(inv[i], base[i]) << i;
      ++high;
    } else if (wavelen > 8192.0 / 1.0) {  // low frequencies: divided by factor (exact: 2^5)
      EXPECT_EQ(inv[i], base[i] / 32.0f) << i;
      ++low;
    } else {  // in between: interpolated with smooth = (8192 / wavelen - 1) / 3
      const double smooth = (8192.0 / wavelen - 1.0) / 3.0;
      const double expected = (1.0 - smooth) * base[i] / 32.0 + smooth * base[i];
      EXPECT_NEAR(inv[i], expected, 1e-6 * expected) << i;
      ++medium;
    }
  }
  EXPECT_GT(high, 0);
  EXPECT_GT(low, 0);
  EXPECT_GT(medium, 0);
}

TEST(RopeRef, RotatesPairsByPositionTimesFrequency) {
  const int64_t heads = 3, d = 8, stride = 30;  // rows padded past the heads
  const std::vector<int32_t> positions{0, 1, 7, 1000};
  const auto inv = rope_inv_freq(d, 10000.0, model::RopeScaling{});
  auto x = random_vector(positions.size() * stride, 1);
  const auto orig = x;
  rope_ref(x, stride, heads, d, positions, inv);
  for (size_t t = 0; t < positions.size(); ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < d / 2; ++i) {
        const double angle = static_cast<double>(positions[t]) * inv[i];
        const double x1 = orig[t * stride + h * d + i], x2 = orig[t * stride + h * d + i + d / 2];
        EXPECT_NEAR(x[t * stride + h * d + i], x1 * std::cos(angle) - x2 * std::sin(angle), 2e-5);
        EXPECT_NEAR(x[t * stride + h * d + i + d / 2], x2 * std::cos(angle) + x1 * std::sin(angle),
                    2e-5);
      }
    }
    for (int64_t c = heads * d; c < stride; ++c) EXPECT_EQ(x[t * stride + c], orig[t * stride + c]);
  }
  // Position 0 is the identity.
  for (int64_t c = 0; c < heads * d; ++c) EXPECT_EQ(x[c], orig[c]);
}

// rope (the forward pass's: cos/sin from a RopeTable, rows over a thread pool) against rope_ref
// (cos/sin computed per token), bit for bit: the table holds the same fp32 angle's double cos/sin
// rounded once, and the rotation is the same function. 1,000 tokens of 6 heads of 128 are 46
// times kMinRunValues, so every pool below splits them into several runs of tokens;
// a run skipped, rotated twice or shifted by a row leaves rows that differ (positions are
// shuffled and mostly nonzero, so no row is left as it was). Positions reach past the table's
// first 1,024 rows; the columns past the heads (a v head) stay untouched.
TEST(Rope, TableAndThreadPoolMatchRopeRefBitForBit) {
  const int64_t heads = 6, d = 128, stride = 7 * d;
  model::RopeScaling llama3;
  llama3.llama3 = true;
  llama3.factor = 32.0;
  llama3.low_freq_factor = 1.0;
  llama3.high_freq_factor = 4.0;
  llama3.original_max_position_embeddings = 8192;
  const std::vector<std::vector<float>> inv_freqs{rope_inv_freq(d, 1e6, model::RopeScaling{}),
                                                  rope_inv_freq(d, 5e5, llama3),
                                                  rope_inv_freq(d, 1e4, model::RopeScaling{})};
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> pos_dist(0, 5'000);
  std::vector<int32_t> positions(1000);
  std::iota(positions.begin(), positions.begin() + 300, 0);  // a prompt's run, then any order
  for (size_t t = 300; t < positions.size(); ++t) positions[t] = pos_dist(rng);
  positions[700] = positions[701];  // the same position twice
  std::vector<std::unique_ptr<ThreadPool>> pools;
  for (int threads : {1, 2, 3, 4}) pools.push_back(std::make_unique<ThreadPool>(threads));

  for (const auto& inv : inv_freqs) {
    RopeTable table(inv);
    table.ensure(*std::max_element(positions.begin(), positions.end()) + 1);
    for (const size_t n : {size_t{1}, size_t{7}, positions.size()}) {
      const std::span<const int32_t> pos(positions.data(), n);
      const auto orig = random_vector(n * stride, 11, 3.0f);
      auto want = orig;
      rope_ref(want, stride, heads, d, pos, inv);
      for (size_t p = 0; p <= pools.size(); ++p) {
        ThreadPool* pool = p == 0 ? nullptr : pools[p - 1].get();
        auto got = orig;
        rope(got, stride, heads, d, pos, table, pool);
        int64_t differ = 0, first = -1;
        for (size_t i = 0; i < got.size(); ++i) {
          if (std::bit_cast<uint32_t>(got[i]) != std::bit_cast<uint32_t>(want[i])) {
            if (differ++ == 0) first = static_cast<int64_t>(i);
          }
        }
        EXPECT_EQ(differ, 0) << "n " << n << ", " << (pool ? pool->num_threads() : 0)
                             << " threads; first at token " << first / stride << ", column "
                             << first % stride;
        for (size_t t = 0; t < n; ++t) {
          for (int64_t c = heads * d; c < stride; ++c) {
            ASSERT_EQ(got[t * stride + c], orig[t * stride + c]);
          }
        }
      }
    }
  }
}

// A position the table does not hold is a bug in the caller (it must grow the table first).
TEST(RopeDeathTest, PositionPastTheTableAborts) {
  const auto inv = rope_inv_freq(8, 1e4, model::RopeScaling{});
  RopeTable table(inv);
  table.ensure(10);  // rows 0..1023
  std::vector<float> x(8);
  const std::vector<int32_t> positions{static_cast<int32_t>(table.num_positions())};
  EXPECT_DEATH(rope(x, 8, 1, 8, positions, table, nullptr), "RopeTable: position");
}

TEST(EmbedRef, CopiesRows) {
  const std::vector<float> table{0, 1, 10, 11, 20, 21};
  const std::vector<int32_t> ids{2, 0, 2};
  std::vector<float> out(6);
  embed_ref(table, 2, ids, out);
  EXPECT_EQ(out, (std::vector<float>{20, 21, 0, 1, 20, 21}));
}

TEST(SiluMulRef, HandComputed) {
  // One token, intermediate 2: gate [0, 2], up [3, -1].
  const std::vector<float> gate_up{0.0f, 2.0f, 3.0f, -1.0f};
  std::vector<float> out(2);
  silu_mul_ref(gate_up, 2, out);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_NEAR(out[1], -2.0 / (1.0 + std::exp(-2.0)), 1e-6);
}

// Rows spread over a pool give the same bits as on one thread (each value is computed alone).
TEST(SiluMulRef, ThreadPoolGivesTheSameBits) {
  const int64_t tokens = 301, inter = 160;  // 48,160 values: a few runs
  const auto gate_up = random_vector(static_cast<size_t>(tokens * 2 * inter), 5, 4.0f);
  std::vector<float> want(static_cast<size_t>(tokens * inter));
  silu_mul_ref(gate_up, inter, want);
  for (int threads : {2, 3}) {
    ThreadPool pool(threads);
    std::vector<float> got(want.size(), -1.0f);
    silu_mul_ref(gate_up, inter, got, &pool);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0) << threads;
  }
}

TEST(KvWriteRef, RoundsToBf16AtTheSlot) {
  const int64_t kv_elems = 2, stride = 5;
  std::vector<float> k{1.00390625f, -3.0f, 9, 9, 9, 0.1f, 0.2f, 9, 9, 9};  // 2 tokens
  std::vector<float> v{2.0f, 1.0f / 3.0f, 9, 9, 9, -0.5f, 7.0f, 9, 9, 9};
  std::vector<uint16_t> kc(8 * kv_elems, 0), vc(8 * kv_elems, 0);
  const std::vector<int64_t> slots{5, 2};
  kv_write_ref(k, v, stride, kv_elems, slots, kc, vc, DType::kBF16);
  EXPECT_EQ(kc[10], float_to_bf16(1.00390625f));  // a tie: rounds to even (1.0)
  EXPECT_EQ(bf16_to_float(kc[10]), 1.0f);
  EXPECT_EQ(bf16_to_float(kc[11]), -3.0f);
  EXPECT_EQ(kc[4], float_to_bf16(0.1f));
  EXPECT_EQ(vc[11], float_to_bf16(1.0f / 3.0f));
  EXPECT_EQ(bf16_to_float(vc[5]), 7.0f);
  EXPECT_EQ(kc[0], 0u);  // untouched slots
}

TEST(ThreadPool, RunsEveryIndexOnce) {
  ThreadPool pool(4);
  std::vector<std::atomic<int>> hits(1000);
  for (int round = 0; round < 3; ++round) {
    pool.parallel_for(1000, [&](int64_t i) { hits[static_cast<size_t>(i)]++; });
  }
  for (auto& h : hits) EXPECT_EQ(h.load(), 3);
}

TEST(ThreadPool, AvailableCoresIsAtLeastOne) { EXPECT_GE(available_cores(), 1); }

// The row runs cover every row exactly once, contiguous and in bounds, for row counts around
// the run boundaries; a few rows of little work stay on the caller, many are split.
TEST(ThreadPool, ParallelForRowsCoversEveryRowOnce) {
  for (int threads : {1, 2, 3, 4}) {
    ThreadPool pool(threads);
    for (const int64_t rows : {1, 2, 3, 7, 8, 9, 15, 16, 17, 100, 1001}) {
      for (const int64_t values_per_row : {int64_t{1}, kMinRunValues / 3, kMinRunValues}) {
        std::vector<std::atomic<int>> seen(static_cast<size_t>(rows));
        std::atomic<int> runs = 0;
        parallel_for_rows(&pool, rows, values_per_row, [&](int64_t begin, int64_t end) {
          ASSERT_TRUE(0 <= begin && begin < end && end <= rows) << begin << ".." << end;
          for (int64_t r = begin; r < end; ++r) seen[static_cast<size_t>(r)] += 1;
          ++runs;
        });
        for (int64_t r = 0; r < rows; ++r) {
          ASSERT_EQ(seen[static_cast<size_t>(r)].load(), 1)
              << "row " << r << " of " << rows << ", " << threads << " threads";
        }
        const int64_t values = rows * values_per_row;
        EXPECT_LE(runs.load(), std::max<int64_t>(1, std::min(rows, kRunsPerThread * threads)));
        if (values < 2 * kMinRunValues || threads == 1) {
          EXPECT_EQ(runs.load(), 1) << rows << " rows of " << values_per_row;
        } else {
          EXPECT_GT(runs.load(), 1) << rows << " rows of " << values_per_row;
        }
      }
    }
  }
}

// linear() split into column slices over a pool (what the CPU backend runs) against the same
// GEMM in one call and against a double-precision reference: odd shapes, bias, accumulate,
// more threads than slices. Equal within fp32 rounding (the slicing must neither drop, repeat
// nor misplace a column; BLAS kernels may sum in another order, so no bitwise claim).
TEST(Linear, PoolSlicesMatchOneCallAndTheReference) {
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (const auto [tokens, in, out] :
       {std::array<int64_t, 3>{1, 96, 1000}, std::array<int64_t, 3>{7, 33, 4099},
        std::array<int64_t, 3>{3, 128, 50}}) {
    std::vector<float> x(static_cast<size_t>(tokens * in)), w(static_cast<size_t>(out * in)),
        b(static_cast<size_t>(out)), start(static_cast<size_t>(tokens * out));
    for (auto* v : {&x, &w, &b, &start}) {
      for (float& e : *v) e = dist(rng);
    }
    for (const bool accumulate : {false, true}) {
      std::vector<float> one = start;
      linear(x, w, b, in, out, one, accumulate);
      for (const int threads : {2, 3, 8}) {
        ThreadPool pool(threads);
        std::vector<float> sliced = start;
        linear(x, w, b, in, out, sliced, accumulate, &pool);
        for (int64_t t = 0; t < tokens; ++t) {
          for (int64_t j = 0; j < out; ++j) {
            double ref = b[static_cast<size_t>(j)] +
                         (accumulate ? start[static_cast<size_t>(t * out + j)] : 0.0);
            for (int64_t k = 0; k < in; ++k) {
              ref +=
                  double{x[static_cast<size_t>(t * in + k)]} * w[static_cast<size_t>(j * in + k)];
            }
            const size_t i = static_cast<size_t>(t * out + j);
            ASSERT_NEAR(sliced[i], ref, 1e-4 * (1.0 + std::abs(ref)))
                << tokens << "x" << in << "x" << out << " threads " << threads << " at " << t << ","
                << j;
            ASSERT_NEAR(sliced[i], one[i], 1e-4 * (1.0 + std::abs(ref)));
          }
        }
      }
    }
  }
}

// --- paged attention against dense attention -------------------------------------------

struct AttnProblem {
  int64_t num_heads = 4, num_kv_heads = 2, head_dim = 16, block_size = 4;
  std::vector<int32_t> q_lens{5, 1, 9, 3};
  std::vector<int32_t> seq_lens{20, 37, 9, 3};
};

// Dense causal attention over contiguous 16-bit-rounded K/V of one sequence (double sums).
void dense_attention(const AttnProblem& p, const float* q, int64_t q_stride, const float* k,
                     const float* v, int64_t q_len, int64_t seq_len, float* out) {
  const int64_t d = p.head_dim, group = p.num_heads / p.num_kv_heads;
  for (int64_t j = 0; j < q_len; ++j) {
    const int64_t ctx = seq_len - q_len + j + 1;
    for (int64_t h = 0; h < p.num_heads; ++h) {
      const int64_t g = h / group;
      std::vector<double> s(static_cast<size_t>(ctx));
      for (int64_t c = 0; c < ctx; ++c) {
        double dot = 0;
        for (int64_t i = 0; i < d; ++i) {
          dot += double{q[j * q_stride + h * d + i]} * k[(c * p.num_kv_heads + g) * d + i];
        }
        s[c] = dot / std::sqrt(static_cast<double>(d));
      }
      const double m = *std::max_element(s.begin(), s.end());
      double sum = 0;
      for (auto& x : s) sum += (x = std::exp(x - m));
      for (int64_t i = 0; i < d; ++i) {
        double o = 0;
        for (int64_t c = 0; c < ctx; ++c) o += s[c] * v[(c * p.num_kv_heads + g) * d + i];
        out[j * p.num_heads * d + h * d + i] = static_cast<float>(o / sum);
      }
    }
  }
}

// Writes every sequence's K/V into the cache through kv_write_ref with the block ids of
// `perm` and runs paged attention over the batch.
std::vector<float> run_paged(const AttnProblem& p, const std::vector<float>& q,
                             const std::vector<std::vector<float>>& k,
                             const std::vector<std::vector<float>>& v,
                             const std::vector<int32_t>& perm, ThreadPool* pool) {
  const int64_t kv_elems = p.num_kv_heads * p.head_dim, max_blocks = 10;
  const auto num_seqs = static_cast<int64_t>(p.seq_lens.size());
  std::vector<uint16_t> kc(perm.size() * p.block_size * kv_elems, 0), vc(kc.size(), 0);
  std::vector<int32_t> tables(static_cast<size_t>(num_seqs * max_blocks), 0), qsl{0};
  size_t next_block = 0;
  for (int64_t s = 0; s < num_seqs; ++s) {
    std::vector<int64_t> slots;
    for (int64_t pos = 0; pos < p.seq_lens[s]; ++pos) {
      if (pos % p.block_size == 0) tables[s * max_blocks + pos / p.block_size] = perm[next_block++];
      slots.push_back(tables[s * max_blocks + pos / p.block_size] * p.block_size +
                      pos % p.block_size);
    }
    kv_write_ref(k[s], v[s], kv_elems, kv_elems, slots, kc, vc, DType::kBF16);
    qsl.push_back(qsl.back() + p.q_lens[s]);
  }
  const int64_t num_tokens = qsl.back();
  const int64_t q_stride = p.num_heads * p.head_dim + 7;
  std::vector<float> out(static_cast<size_t>(num_tokens * p.num_heads * p.head_dim));
  PagedAttentionArgs a;
  a.q = q;
  a.q_stride = q_stride;
  a.k_cache = kc;
  a.v_cache = vc;
  a.cache_dtype = DType::kBF16;
  a.block_size = p.block_size;
  a.num_heads = p.num_heads;
  a.num_kv_heads = p.num_kv_heads;
  a.head_dim = p.head_dim;
  a.scale = 1.0f / std::sqrt(static_cast<float>(p.head_dim));
  a.query_start_loc = qsl;
  a.seq_lens = p.seq_lens;
  a.block_tables = tables;
  a.max_num_blocks_per_seq = max_blocks;
  a.out = out;
  paged_attention_ref(a, pool);
  return out;
}

TEST(PagedAttentionRef, MatchesDenseAndIgnoresBlockLayout) {
  const AttnProblem p;
  const int64_t kv_elems = p.num_kv_heads * p.head_dim;
  const int64_t q_stride = p.num_heads * p.head_dim + 7;
  const int64_t num_tokens = std::accumulate(p.q_lens.begin(), p.q_lens.end(), int64_t{0});
  const auto q = random_vector(static_cast<size_t>(num_tokens * q_stride), 7);
  std::vector<std::vector<float>> k, v;
  for (size_t s = 0; s < p.seq_lens.size(); ++s) {
    k.push_back(random_vector(static_cast<size_t>(p.seq_lens[s] * kv_elems), 100 + s, 2.0f));
    v.push_back(random_vector(static_cast<size_t>(p.seq_lens[s] * kv_elems), 200 + s));
  }
  std::vector<int32_t> identity(24), shuffled(24);
  std::iota(identity.begin(), identity.end(), 0);
  shuffled = identity;
  std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937(3));

  ThreadPool pool(3);
  const auto a = run_paged(p, q, k, v, identity, nullptr);
  const auto b = run_paged(p, q, k, v, shuffled, nullptr);
  const auto c = run_paged(p, q, k, v, shuffled, &pool);
  EXPECT_EQ(a, b) << "block ids must not change a single bit";
  EXPECT_EQ(a, c) << "threads must not change a single bit";

  // Dense reference on the bf16-rounded K/V.
  int64_t row = 0;
  for (size_t s = 0; s < p.seq_lens.size(); ++s) {
    std::vector<float> kr(k[s].size()), vr(v[s].size());
    for (size_t i = 0; i < kr.size(); ++i) {
      kr[i] = bf16_to_float(float_to_bf16(k[s][i]));
      vr[i] = bf16_to_float(float_to_bf16(v[s][i]));
    }
    std::vector<float> expected(static_cast<size_t>(p.q_lens[s] * p.num_heads * p.head_dim));
    dense_attention(p, q.data() + row * q_stride, q_stride, kr.data(), vr.data(), p.q_lens[s],
                    p.seq_lens[s], expected.data());
    for (size_t i = 0; i < expected.size(); ++i) {
      ASSERT_NEAR(a[row * p.num_heads * p.head_dim + i], expected[i], 2e-5) << "seq " << s;
    }
    row += p.q_lens[s];
  }
}

// The attention's inner loops on every instruction set this processor has give the same bits
// as the scalar ones (same operations, same order): head dims with and without a 64-wide
// tail, key counts not a multiple of 4, a range of Hadamard-domain values.
TEST(ContextAttentionRef, EveryInstructionSetGivesTheSameBits) {
  for (const int64_t d : {int64_t{128}, int64_t{136}, int64_t{8}}) {
    const int64_t heads = 4, kv_heads = 2;
    const std::vector<int32_t> q_lens{1, 7, 3}, seq_lens{38, 7, 61};
    std::vector<int32_t> qsl{0};
    for (int32_t l : q_lens) qsl.push_back(qsl.back() + l);
    const int64_t num_tokens = qsl.back();
    const auto q = random_vector(static_cast<size_t>(num_tokens * heads * d), 3);
    const auto keys = random_vector(static_cast<size_t>(3 * kv_heads * 61 * d), 4, 2.0f);
    const auto values = random_vector(keys.size(), 5);
    const KvGatherFn gather = [&](int64_t seq, int64_t g, int64_t b, int64_t e, float* k,
                                  float* v) {
      const size_t base = static_cast<size_t>(((seq * kv_heads + g) * 61 + b) * d);
      if (k != nullptr) std::copy_n(keys.begin() + base, (e - b) * d, k);
      if (v != nullptr) std::copy_n(values.begin() + base, (e - b) * d, v);
      if (seq != 2 || d == 136) return RotatedValues{};  // Hadamard: 2^n
      const int64_t r0 = std::max<int64_t>(b, 5), r1 = std::min<int64_t>(e, 40);
      return r0 < r1 ? RotatedValues{r0, r1} : RotatedValues{};
    };
    std::vector<float> ref;
    for (const CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
      if (!cpu_supports(isa)) continue;
      std::vector<float> out(static_cast<size_t>(num_tokens * heads * d));
      AttentionArgs a{q, heads * d, heads, kv_heads, d, 0.125f, qsl, seq_lens, out};
      a.isa = isa;
      context_attention_ref(a, gather, nullptr);
      if (ref.empty()) {
        ref = out;
      } else {
        ASSERT_EQ(out, ref) << cpu_isa_name(isa) << " head_dim " << d;
      }
    }
  }
}

// Contexts longer than one chunk (kAttentionChunk): the chunked reads give the bits of one
// whole-context pass written out here in the reference's order (eight partial sums per dot,
// a sequential softmax, the Hadamard-domain values summed first and rotated back, then the
// plain ones before and after them), on every instruction set; two query chunks, a rotated range
// that crosses chunk boundaries, contexts ending inside a chunk.
TEST(ContextAttentionRef, ChunkedReadsGiveTheBitsOfOneWholePass) {
  const int64_t d = 128, heads = 6, kv_heads = 2, group = heads / kv_heads;
  const std::vector<int32_t> q_lens{1, 40, 3}, seq_lens{700, 333, 260};
  std::vector<int32_t> qsl{0};
  for (int32_t l : q_lens) qsl.push_back(qsl.back() + l);
  const int64_t num_tokens = qsl.back(), max_len = 700;
  const auto q = random_vector(static_cast<size_t>(num_tokens * heads * d), 13);
  const auto keys = random_vector(static_cast<size_t>(3 * kv_heads * max_len * d), 14, 2.0f);
  const auto values = random_vector(keys.size(), 15);
  const int64_t rb = 64, re = 600;  // sequences 0 and 1: values [rb, re) in the Hadamard domain
  auto row = [&](const std::vector<float>& x, int64_t s, int64_t g, int64_t p) {
    return x.data() + ((s * kv_heads + g) * max_len + p) * d;
  };
  const KvGatherFn gather = [&](int64_t s, int64_t g, int64_t b, int64_t e, float* k, float* v) {
    if (k != nullptr) std::copy_n(row(keys, s, g, b), (e - b) * d, k);
    if (v != nullptr) std::copy_n(row(values, s, g, b), (e - b) * d, v);
    const int64_t r0 = std::max(b, rb), r1 = std::min(e, re);
    return s < 2 && r0 < r1 ? RotatedValues{r0, r1} : RotatedValues{};
  };
  std::vector<float> expected(static_cast<size_t>(num_tokens * heads * d));
  for (int64_t s = 0; s < 3; ++s) {
    for (int64_t j = 0; j < q_lens[s]; ++j) {
      const int64_t t = qsl[s] + j, ctx = seq_lens[s] - q_lens[s] + j + 1;
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t g = h / group;
        const float* qh = q.data() + (t * heads + h) * d;
        std::vector<float> sc(static_cast<size_t>(ctx));
        for (int64_t p = 0; p < ctx; ++p) {
          float acc[8] = {};
          for (int64_t i = 0; i < d; i += 8) {
            for (int u = 0; u < 8; ++u) acc[u] += qh[i + u] * row(keys, s, g, p)[i + u];
          }
          sc[p] =
              (((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))) *
              0.125f;
        }
        float mx = -INFINITY, sum = 0.0f;
        for (float x : sc) mx = std::max(mx, x);
        for (float& x : sc) {
          x = std::exp(x - mx);
          sum += x;
        }
        float* o = expected.data() + (t * heads + h) * d;
        const int64_t rot_end = s < 2 ? std::min(re, ctx) : 0, rot_begin = s < 2 ? rb : 0;
        std::vector<float> o_rot(static_cast<size_t>(d), 0.0f);
        if (rot_begin < rot_end) {
          for (int64_t p = rot_begin; p < rot_end; ++p) {
            for (int64_t i = 0; i < d; ++i) o_rot[i] += sc[p] * row(values, s, g, p)[i];
          }
          kv::hadamard_ref(o_rot);
        }
        std::copy(o_rot.begin(), o_rot.end(), o);
        const int64_t plain_end = rot_begin < rot_end ? rot_begin : ctx;
        for (int64_t p = 0; p < plain_end; ++p) {
          for (int64_t i = 0; i < d; ++i) o[i] += sc[p] * row(values, s, g, p)[i];
        }
        for (int64_t p = std::max(plain_end, rot_end); p < ctx; ++p) {
          for (int64_t i = 0; i < d; ++i) o[i] += sc[p] * row(values, s, g, p)[i];
        }
        const float inv = 1.0f / sum;
        for (int64_t i = 0; i < d; ++i) o[i] *= inv;
      }
    }
  }
  for (const CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (!cpu_supports(isa)) continue;
    std::vector<float> out(expected.size());
    AttentionArgs a{q, heads * d, heads, kv_heads, d, 0.125f, qsl, seq_lens, out};
    a.isa = isa;
    ThreadPool pool(2);
    context_attention_ref(a, gather, &pool);
    ASSERT_EQ(out, expected) << cpu_isa_name(isa);
  }
}

}  // namespace
}  // namespace s4kv::backend::cpu
