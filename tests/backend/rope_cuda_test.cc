// launch_rope against rope_rotate (the CPU path's rotation, equal to rope_ref), bit for bit:
// query- and key-like head counts, odd token counts, random positions up to 32k, Qwen2.5 and
// Llama-3 RoPE bases, head_dim 64 and 128. Skips without a device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cuda/device.h"
#include "backend/cuda/rope.cuh"
#include "backend/rope_table.h"

namespace s4kv::backend {
namespace {

struct RopeCase {
  int64_t tokens, heads, head_dim;
  double theta;
};

class RopeCuda : public ::testing::TestWithParam<RopeCase> {};

TEST_P(RopeCuda, EqualsRopeRotateBitForBit) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const RopeCase p = GetParam();
  const int64_t half = p.head_dim / 2;
  std::vector<float> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    inv_freq[static_cast<size_t>(i)] = static_cast<float>(
        1.0 / std::pow(p.theta, 2.0 * static_cast<double>(i) / static_cast<double>(p.head_dim)));
  }
  RopeTable table(inv_freq);
  table.ensure(32768);
  std::mt19937 rng(static_cast<uint32_t>(p.tokens * 31 + p.heads));
  std::normal_distribution<float> g(0.0f, 2.0f);
  std::vector<float> x(static_cast<size_t>(p.tokens * p.heads * p.head_dim));
  for (float& v : x) v = g(rng);
  std::vector<int32_t> pos(static_cast<size_t>(p.tokens));
  for (auto& q : pos) q = static_cast<int32_t>(rng() % 32768);

  std::vector<float> want = x;
  for (int64_t t = 0; t < p.tokens; ++t) {
    for (int64_t h = 0; h < p.heads; ++h) {
      float* row = want.data() + (t * p.heads + h) * p.head_dim;
      rope_rotate(row, row, table.cos(pos[static_cast<size_t>(t)]),
                  table.sin(pos[static_cast<size_t>(t)]), p.head_dim);
    }
  }
  cuda::DeviceBuffer dx(x.size() * 4), dp(pos.size() * 4), dc(table.cos_table().size() * 4),
      ds(table.sin_table().size() * 4);
  dx.copy_from_host(x.data(), x.size() * 4);
  dp.copy_from_host(pos.data(), pos.size() * 4);
  dc.copy_from_host(table.cos_table().data(), dc.bytes());
  ds.copy_from_host(table.sin_table().data(), ds.bytes());
  cuda::RopeArgs a;
  a.x = static_cast<float*>(dx.data());
  a.positions = static_cast<const int32_t*>(dp.data());
  a.cos = static_cast<const float*>(dc.data());
  a.sin = static_cast<const float*>(ds.data());
  a.num_tokens = p.tokens;
  a.num_heads = p.heads;
  a.head_dim = p.head_dim;
  cuda::launch_rope(a, nullptr);
  std::vector<float> got(x.size());
  dx.copy_to_host(got.data(), got.size() * 4);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0);
}

INSTANTIATE_TEST_SUITE_P(Shapes, RopeCuda,
                         ::testing::Values(RopeCase{1, 28, 128, 1e6}, RopeCase{37, 4, 128, 5e5},
                                           RopeCase{513, 8, 128, 1e6}, RopeCase{5, 3, 64, 1e4}));

}  // namespace
}  // namespace s4kv::backend
