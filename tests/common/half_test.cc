// fp16/bf16 conversion: exhaustive round trips and round-to-nearest-even at the edges.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "common/half.h"

namespace s4kv {
namespace {

TEST(Half, Fp16RoundTripsEveryValue) {
  for (uint32_t h = 0; h <= 0xffffu; ++h) {
    const float f = fp16_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_fp16(f), h) << std::hex << h;
  }
}

TEST(Half, Bf16RoundTripsEveryValue) {
  for (uint32_t h = 0; h <= 0xffffu; ++h) {
    const float f = bf16_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_bf16(f), h) << std::hex << h;
  }
}

TEST(Half, Fp16KnownValues) {
  EXPECT_EQ(float_to_fp16(1.0f), 0x3c00);
  EXPECT_EQ(float_to_fp16(-2.0f), 0xc000);
  EXPECT_EQ(float_to_fp16(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_fp16(65520.0f), 0x7c00);        // rounds to inf
  EXPECT_EQ(float_to_fp16(5.9604645e-08f), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_fp16(2.9802322e-08f), 0x0000);  // exactly half: ties to even (0)
  EXPECT_EQ(float_to_fp16(8.940697e-08f), 0x0002);   // 1.5 ulp: ties to even (2)
  // 1 + 2^-11 is halfway between 1 and the next fp16: ties to even (1.0).
  EXPECT_EQ(float_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(float_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_TRUE(std::isnan(fp16_to_float(float_to_fp16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(Half, Bf16KnownValues) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);      // tie to even
  EXPECT_EQ(float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);  // tie to even
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

}  // namespace
}  // namespace s4kv
