// The CPU reference RMSNorm against values computed by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/cpu/rmsnorm.h"

namespace s4kv::backend::cpu {
namespace {

TEST(RmsnormRef, MatchesHandComputedRow) {
  // Row [3, 4]: mean square 12.5, rms sqrt(12.5 + eps).
  std::vector<float> x{3.0f, 4.0f, 0.0f, 0.0f};
  std::vector<float> w{1.0f, 2.0f};
  std::vector<float> out(4);
  rmsnorm_ref(x, w, 0.0f, 2, 2, out);
  const float inv = 1.0f / std::sqrt(12.5f);
  EXPECT_FLOAT_EQ(out[0], 3.0f * inv);
  EXPECT_FLOAT_EQ(out[1], 8.0f * inv);
  // An all-zero row stays zero thanks to eps (no division by zero).
  rmsnorm_ref(x, w, 1e-6f, 2, 2, out);
  EXPECT_EQ(out[2], 0.0f);
  EXPECT_EQ(out[3], 0.0f);
}

TEST(RmsnormRef, InPlaceEqualsOutOfPlace) {
  std::vector<float> x{0.5f, -1.5f, 2.0f, 7.0f, -3.0f, 0.25f};
  std::vector<float> w{1.0f, 0.5f, -2.0f};
  std::vector<float> out(6);
  rmsnorm_ref(x, w, 1e-5f, 2, 3, out);
  rmsnorm_ref(x, w, 1e-5f, 2, 3, x);
  EXPECT_EQ(out, x);
}

}  // namespace
}  // namespace s4kv::backend::cpu
