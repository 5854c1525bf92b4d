// The 16-bit-weight kernels (gemm16.h, gemm16_packed.h) on every instruction set this processor
// has, against gemm16's scalar reference and a double-precision sum; widening bit for bit over
// all 65,536 values; linear() with 16-bit weights (direct and packed kernels, sliced over a
// pool) against linear() over the same weights in fp32; WeightMatrix's dtype rules.
#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/cpu_weights.h"
#include "backend/cpu/gemm16.h"
#include "backend/cpu/gemm16_packed.h"
#include "backend/cpu/linear.h"
#include "backend/cpu/thread_pool.h"
#include "common/half.h"

namespace s4kv::backend::cpu {
namespace {

constexpr CpuIsa kIsas[] = {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512};

float widen(uint16_t h, bool bf16) { return bf16 ? bf16_to_float(h) : fp16_to_float(h); }

// Random 16-bit weights of normal values around 1 (no inf / NaN), as a checkpoint has.
std::vector<uint16_t> random_weights(size_t n, bool bf16, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<uint16_t> w(n);
  for (auto& h : w) h = bf16 ? float_to_bf16(dist(rng)) : float_to_fp16(dist(rng));
  return w;
}

TEST(Gemm16, WidenIsExactForEveryValue) {
  std::vector<uint16_t> all(65536);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  for (const bool bf16 : {true, false}) {
    for (const CpuIsa isa : kIsas) {
      if (!cpu_supports(isa)) continue;
      std::vector<float> out(all.size() + 3);
      // An odd count and offset: the vector loops' tails run too.
      widen16(isa, all.data() + 1, bf16, static_cast<int64_t>(all.size()) - 2, out.data());
      for (size_t i = 1; i + 1 < all.size(); ++i) {
        const float ref = widen(all[i], bf16);
        const float got = out[i - 1];
        if (std::isnan(ref)) {
          ASSERT_TRUE(std::isnan(got)) << cpu_isa_name(isa) << " " << i;
        } else {
          ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(ref))
              << cpu_isa_name(isa) << (bf16 ? " bf16 " : " fp16 ") << i;
        }
      }
    }
  }
}

// Products on every instruction set this processor has against gemm16's scalar reference and a
// double-precision sum, for one shape: x and out with strides wider than their rows, both
// accumulate modes, out's start values of about start_scale. Columns of out past n must stay
// untouched.
using GemmFn = void (*)(CpuIsa, const float*, int64_t, int64_t, int64_t, const uint16_t*, bool,
                        int64_t, float*, int64_t, bool);

int check_against_reference(GemmFn gemm, int64_t m, int64_t k, int64_t n, bool bf16,
                            std::mt19937& rng, float start_scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const int64_t xs = k + 3, os = n + 5;
  std::vector<float> x(static_cast<size_t>(m * xs));
  for (float& v : x) v = dist(rng);
  const std::vector<uint16_t> w = random_weights(static_cast<size_t>(n * k), bf16, rng);
  std::vector<float> start(static_cast<size_t>(m * os));
  for (float& v : start) v = start_scale * dist(rng);
  // The exact sums without the start value, and the magnitudes of their products.
  std::vector<double> exact(static_cast<size_t>(m * n)), magnitude(exact.size());
  for (int64_t t = 0; t < m; ++t) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0.0, mag = 0.0;
      for (int64_t c = 0; c < k; ++c) {
        const double p = double{x[static_cast<size_t>(t * xs + c)]} *
                         widen(w[static_cast<size_t>(j * k + c)], bf16);
        sum += p;
        mag += std::abs(p);
      }
      exact[static_cast<size_t>(t * n + j)] = sum;
      magnitude[static_cast<size_t>(t * n + j)] = mag;
    }
  }
  int checked = 0;
  for (const bool accumulate : {false, true}) {
    std::vector<float> ref = start;
    gemm16(CpuIsa::kScalar, x.data(), xs, m, k, w.data(), bf16, n, ref.data(), os, accumulate);
    for (const CpuIsa isa : kIsas) {
      if (!cpu_supports(isa)) continue;
      std::vector<float> out = start;
      gemm(isa, x.data(), xs, m, k, w.data(), bf16, n, out.data(), os, accumulate);
      for (int64_t t = 0; t < m; ++t) {
        for (int64_t j = 0; j < os; ++j) {
          const size_t i = static_cast<size_t>(t * os + j);
          if (j >= n) {  // outside the product: untouched
            EXPECT_EQ(out[i], start[i]) << cpu_isa_name(isa) << " wrote column " << j;
            if (out[i] != start[i]) return checked;
            continue;
          }
          const size_t e = static_cast<size_t>(t * n + j);
          const double want = exact[e] + (accumulate ? double{start[i]} : 0.0);
          // fp32 sums of k products, in any order: within k ulps of their magnitude; then a
          // rounding at the result's magnitude for adding the sum to out, once per 256-deep
          // block of k (gemm16_packed adds each block's sum), not once per product.
          const double tol = 1e-7 * static_cast<double>(k + 2) * (magnitude[e] + 1.0) +
                             1.2e-7 * std::abs(want) * static_cast<double>(1 + k / 256);
          const bool near_exact = std::abs(out[i] - want) <= tol;
          const bool near_ref = std::abs(out[i] - ref[i]) <= 2 * tol;
          EXPECT_TRUE(near_exact && near_ref)
              << cpu_isa_name(isa) << (bf16 ? " bf16 " : " fp16 ") << m << "x" << k << "x" << n
              << (accumulate ? " accumulate" : "") << " at " << t << "," << j << ": " << out[i]
              << ", exact " << want << ", scalar " << ref[i] << ", tolerance " << tol;
          if (!near_exact || !near_ref) return checked;
          ++checked;
        }
      }
    }
  }
  return checked;
}

// Every tile shape and tail: tokens 1..9 and 16, 17 (token tiles of 4 / 2 and remainders),
// k not a multiple of 8 or 16, rows not a multiple of 4.
TEST(Gemm16, KernelsMatchTheReference) {
  std::mt19937 rng(5);
  int checked = 0;
  for (const bool bf16 : {true, false}) {
    for (const auto [m, k, n] :
         {std::array<int64_t, 3>{1, 512, 67}, std::array<int64_t, 3>{2, 33, 5},
          std::array<int64_t, 3>{3, 16, 4}, std::array<int64_t, 3>{4, 1000, 9},
          std::array<int64_t, 3>{5, 8, 1}, std::array<int64_t, 3>{7, 129, 13},
          std::array<int64_t, 3>{8, 1024, 64}, std::array<int64_t, 3>{9, 7, 3},
          std::array<int64_t, 3>{16, 256, 20}, std::array<int64_t, 3>{17, 40, 6}}) {
      checked += check_against_reference(&gemm16, m, k, n, bf16, rng);
      ASSERT_FALSE(HasFailure());
    }
  }
  EXPECT_GT(checked, 0);
}

// gemm16_packed's blocking on every instruction set: token counts that are and are not
// multiples of the token tiles (8 AVX-512, 6 AVX2, 4 scalar), outputs around the panel widths
// (32, 16) and the 256-output block, k below one vector, inside one 256-deep block and across
// blocks with a tail.
TEST(Gemm16, PackedKernelsMatchTheReference) {
  std::mt19937 rng(6);
  int checked = 0;
  for (const bool bf16 : {true, false}) {
    for (const auto [m, k, n] :
         {std::array<int64_t, 3>{17, 40, 6}, std::array<int64_t, 3>{18, 1, 1},
          std::array<int64_t, 3>{23, 7, 33}, std::array<int64_t, 3>{24, 16, 32},
          std::array<int64_t, 3>{25, 100, 300}, std::array<int64_t, 3>{48, 256, 64},
          std::array<int64_t, 3>{61, 257, 17}, std::array<int64_t, 3>{100, 520, 257},
          std::array<int64_t, 3>{131, 31, 95}, std::array<int64_t, 3>{600, 130, 70}}) {
      checked += check_against_reference(&gemm16_packed, m, k, n, bf16, rng);
      ASSERT_FALSE(HasFailure());
    }
  }
  EXPECT_GT(checked, 0);
}

// With accumulate onto values far larger than the products (linear()'s residual stream), the
// products must be summed before they are added to out: adding each product to out would round
// every one of them at out's magnitude.
TEST(Gemm16, AccumulateAddsTheSumOnceNotEachProduct) {
  std::mt19937 rng(7);
  for (const bool bf16 : {true, false}) {
    for (const auto [m, k, n] :
         {std::array<int64_t, 3>{8, 512, 16}, std::array<int64_t, 3>{40, 200, 33},
          std::array<int64_t, 3>{40, 1100, 40}}) {
      check_against_reference(&gemm16, m, k, n, bf16, rng, 1e6f);
      check_against_reference(&gemm16_packed, m, k, n, bf16, rng, 1e6f);
      ASSERT_FALSE(HasFailure());
    }
  }
}

// linear() with a 16-bit WeightMatrix against linear() with the same weights widened to fp32
// (the sgemm path), on both sides of kGemm16DirectTokens (direct and packed kernels), with bias,
// accumulate and a pool.
TEST(Gemm16, LinearWith16BitWeightsMatchesFp32Weights) {
  std::mt19937 rng(8);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (const bool bf16 : {true, false}) {
    const int64_t in = 200, out = 300;
    model::TensorView t;
    t.dtype = bf16 ? DType::kBF16 : DType::kF16;
    t.shape = {out, in};
    const std::vector<uint16_t> bits = random_weights(static_cast<size_t>(out * in), bf16, rng);
    t.data = std::as_bytes(std::span(bits));
    WeightMatrix w16;
    w16.append(t);
    ASSERT_TRUE(w16.is_16bit());
    ASSERT_EQ(w16.rows, out);
    ASSERT_EQ(w16.cols, in);
    std::vector<float> w32(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) w32[i] = widen(bits[i], bf16);
    std::vector<float> bias(static_cast<size_t>(out));
    for (float& v : bias) v = dist(rng);
    for (const int64_t tokens : {int64_t{1}, int64_t{3}, kGemm16DirectTokens,
                                 kGemm16DirectTokens + 1, int64_t{40}, int64_t{131}}) {
      std::vector<float> x(static_cast<size_t>(tokens * in)),
          start(static_cast<size_t>(tokens * out));
      for (float& v : x) v = dist(rng);
      for (float& v : start) v = dist(rng);
      for (const bool accumulate : {false, true}) {
        std::vector<float> ref = start;
        linear(x, w32, bias, in, out, ref, accumulate);
        for (const int threads : {1, 3}) {
          ThreadPool pool(threads);
          std::vector<float> got = start;
          linear(x, w16, bias, got, accumulate, &pool);
          for (size_t i = 0; i < got.size(); ++i) {
            ASSERT_NEAR(got[i], ref[i], 1e-4 * (1.0 + std::abs(ref[i])))
                << (bf16 ? "bf16 " : "fp16 ") << tokens << " tokens, threads " << threads << " at "
                << i;
          }
        }
      }
    }
  }
}

TEST(Gemm16, WeightMatrixKeeps16BitAndWidensMixedDtypes) {
  const std::vector<uint16_t> a = {float_to_bf16(1.5f), float_to_bf16(-2.0f)};
  const std::vector<float> b = {3.25f, 0.5f};
  model::TensorView ta{DType::kBF16, {1, 2}, std::as_bytes(std::span(a))};
  model::TensorView tb{DType::kF32, {1, 2}, std::as_bytes(std::span(b))};
  WeightMatrix m;
  m.append(ta);
  m.append(ta);
  EXPECT_EQ(m.dtype, DType::kBF16);
  EXPECT_EQ(m.num_bytes(), 8);
  m.append(tb);  // another dtype: the whole matrix becomes fp32
  EXPECT_EQ(m.dtype, DType::kF32);
  EXPECT_TRUE(m.h16.empty());
  EXPECT_EQ(m.rows, 3);
  EXPECT_EQ(m.f32, (std::vector<float>{1.5f, -2.0f, 1.5f, -2.0f, 3.25f, 0.5f}));
  float row[2];
  m.row_as_f32(2, row);
  EXPECT_EQ(row[0], 3.25f);
}

}  // namespace
}  // namespace s4kv::backend::cpu
