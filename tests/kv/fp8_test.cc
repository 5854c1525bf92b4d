// fp8_e4m3 (E4M3FN, saturating, as vLLM's fp8 cache on CUDA): all 256 codes decoded and
// re-encoded, hand-picked values, and encoding checked against a brute-force nearest-even
// search over the finite codes at every midpoint and on random floats.
#include "kv/fp8_e4m3.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

namespace s4kv::kv {
namespace {

bool is_nan_code(int v) { return (v & 0x7f) == 0x7f; }

// The finite code nearest to x, ties to the even code (mantissa bit 0), saturating. An oracle
// independent of the bit tricks: it only compares decoded values.
uint8_t nearest_code(float x) {
  if (std::isnan(x)) return kFp8E4M3NanBits;
  const double ax = std::fabs(static_cast<double>(x));
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (ax >= 448.0) return sign | kFp8E4M3MaxBits;
  int best = 0;
  for (int v = 1; v <= 0x7e; ++v) {
    const double dv = std::fabs(ax - fp8_e4m3_to_float(static_cast<uint8_t>(v)));
    const double db = std::fabs(ax - fp8_e4m3_to_float(static_cast<uint8_t>(best)));
    if (dv < db || (dv == db && (v & 1) == 0)) best = v;
  }
  return static_cast<uint8_t>(sign | best);
}

TEST(Fp8E4M3, EveryCodeRoundTrips) {
  int nans = 0;
  for (int v = 0; v < 256; ++v) {
    const float f = fp8_e4m3_to_float(static_cast<uint8_t>(v));
    if (is_nan_code(v)) {
      EXPECT_TRUE(std::isnan(f)) << v;
      EXPECT_EQ(float_to_fp8_e4m3(f), kFp8E4M3NanBits);
      ++nans;
      continue;
    }
    ASSERT_TRUE(std::isfinite(f)) << v;
    EXPECT_EQ(float_to_fp8_e4m3(f), v) << v << " " << f;
    EXPECT_EQ(std::signbit(f), v >= 0x80) << v;
  }
  EXPECT_EQ(nans, 2);
}

TEST(Fp8E4M3, DecodesKnownCodes) {
  EXPECT_EQ(fp8_e4m3_to_float(0x00), 0.0f);
  EXPECT_TRUE(std::signbit(fp8_e4m3_to_float(0x80)));
  EXPECT_EQ(fp8_e4m3_to_float(0x38), 1.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0xb8), -1.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0xfe), -448.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0x08), 0x1p-6f);      // smallest normal
  EXPECT_EQ(fp8_e4m3_to_float(0x01), 0x1p-9f);      // smallest subnormal
  EXPECT_EQ(fp8_e4m3_to_float(0x07), 7 * 0x1p-9f);  // largest subnormal
  EXPECT_EQ(fp8_e4m3_to_float(0x77), 240.0f);       // 1.875 * 2^7
  EXPECT_EQ(fp8_e4m3_to_float(0x3c), 1.5f);
}

TEST(Fp8E4M3, EncodesHandPickedValues) {
  EXPECT_EQ(float_to_fp8_e4m3(1.0f), 0x38);
  EXPECT_EQ(float_to_fp8_e4m3(-0.0f), 0x80);
  EXPECT_EQ(float_to_fp8_e4m3(448.0f), 0x7e);
  EXPECT_EQ(float_to_fp8_e4m3(464.0f), 0x7e);  // tie between 448 and 480: even (448)
  EXPECT_EQ(float_to_fp8_e4m3(500.0f), 0x7e);  // saturates
  EXPECT_EQ(float_to_fp8_e4m3(1e30f), 0x7e);
  EXPECT_EQ(float_to_fp8_e4m3(-1e30f), 0xfe);
  EXPECT_EQ(float_to_fp8_e4m3(std::numeric_limits<float>::infinity()), 0x7e);
  EXPECT_EQ(float_to_fp8_e4m3(-std::numeric_limits<float>::infinity()), 0xfe);
  EXPECT_EQ(float_to_fp8_e4m3(std::numeric_limits<float>::quiet_NaN()), 0x7f);
  EXPECT_EQ(float_to_fp8_e4m3(-std::numeric_limits<float>::quiet_NaN()), 0x7f);
  EXPECT_EQ(float_to_fp8_e4m3(0x1p-10f), 0x00);  // half the smallest subnormal: even
  EXPECT_EQ(float_to_fp8_e4m3(-0x1p-10f), 0x80);
  EXPECT_EQ(float_to_fp8_e4m3(0x1.000002p-10f), 0x01);  // just above half
  EXPECT_EQ(float_to_fp8_e4m3(3 * 0x1p-10f), 0x02);     // 1.5 subnormal steps: even (2)
  EXPECT_EQ(float_to_fp8_e4m3(15 * 0x1p-10f), 0x08);    // 7.5 steps rounds up to min normal
  EXPECT_EQ(float_to_fp8_e4m3(1.0625f), 0x38);          // 1 + half ulp: even (1.0)
  EXPECT_EQ(float_to_fp8_e4m3(1.1875f), 0x3a);          // 1.125 + half ulp: even (1.25)
  EXPECT_EQ(float_to_fp8_e4m3(0.3f), 0x2a);             // 0.3 -> 0.3125 (1.25 * 2^-2)
  EXPECT_EQ(float_to_fp8_e4m3(-3.3f), 0xc5);            // -3.25
  EXPECT_EQ(float_to_fp8_e4m3(1e-30f), 0x00);
}

// Every midpoint between adjacent non-negative codes, and one fp32 ulp either side of it.
TEST(Fp8E4M3, MidpointsMatchBruteForce) {
  for (int v = 0; v < 0x7e; ++v) {
    const float lo = fp8_e4m3_to_float(static_cast<uint8_t>(v));
    const float hi = fp8_e4m3_to_float(static_cast<uint8_t>(v + 1));
    const float mid = lo + (hi - lo) / 2;  // exact: both fit in a few bits
    for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
      EXPECT_EQ(float_to_fp8_e4m3(x), nearest_code(x)) << x;
      EXPECT_EQ(float_to_fp8_e4m3(-x), nearest_code(-x)) << -x;
    }
    EXPECT_EQ(float_to_fp8_e4m3(mid), (v & 1) ? v + 1 : v) << mid;
  }
}

TEST(Fp8E4M3, RandomFloatsMatchBruteForce) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> exponent(-14.0f, 10.0f);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  for (int i = 0; i < 20000; ++i) {
    float x = std::ldexp(mantissa(rng), static_cast<int>(exponent(rng)));
    if (i % 2) x = -x;
    ASSERT_EQ(float_to_fp8_e4m3(x), nearest_code(x)) << x;
  }
}

}  // namespace
}  // namespace s4kv::kv
