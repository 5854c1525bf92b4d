// launch_rmsnorm against the CPU reference on fresh random inputs. Skips without a device.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/rmsnorm.h"
#include "backend/cuda/device.h"
#include "backend/cuda/rmsnorm.cuh"
#include "common/half.h"

namespace s4kv::backend {
namespace {

std::vector<uint16_t> random_bf16(size_t n, std::mt19937& rng, float scale) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = float_to_bf16(dist(rng));
  return v;
}

std::vector<float> to_float(const std::vector<uint16_t>& v) {
  std::vector<float> f(v.size());
  for (size_t i = 0; i < v.size(); ++i) f[i] = bf16_to_float(v[i]);
  return f;
}

class RmsnormCuda : public ::testing::TestWithParam<std::pair<int64_t, int64_t>> {};

TEST_P(RmsnormCuda, MatchesCpuReference) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const auto [num_tokens, hidden] = GetParam();
  std::mt19937 rng(static_cast<unsigned>(num_tokens * 131 + hidden));
  const auto x = random_bf16(static_cast<size_t>(num_tokens * hidden), rng, 3.0f);
  const auto w = random_bf16(static_cast<size_t>(hidden), rng, 1.0f);

  std::vector<float> ref(x.size());
  cpu::rmsnorm_ref(to_float(x), to_float(w), 1e-6f, num_tokens, hidden, ref);

  cuda::DeviceBuffer dx(x.size() * 2), dw(w.size() * 2), dout(x.size() * 2);
  dx.copy_from_host(x.data(), x.size() * 2);
  dw.copy_from_host(w.data(), w.size() * 2);
  cuda::RmsnormArgs args;
  args.x = static_cast<const uint16_t*>(dx.data());
  args.weight = static_cast<const uint16_t*>(dw.data());
  args.out = static_cast<uint16_t*>(dout.data());
  args.num_tokens = num_tokens;
  args.hidden_size = hidden;
  args.eps = 1e-6f;
  cuda::launch_rmsnorm(args, nullptr);
  std::vector<uint16_t> got(x.size());
  dout.copy_to_host(got.data(), got.size() * 2);

  // The device sums in a different order and rounds to bf16: allow one bf16 ulp
  // (relative 2^-8) plus a tiny absolute slack.
  for (size_t i = 0; i < got.size(); ++i) {
    const float g = bf16_to_float(got[i]);
    ASSERT_NEAR(g, ref[i], std::fabs(ref[i]) * (1.0f / 128.0f) + 1e-6f) << "at " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, RmsnormCuda,
                         ::testing::Values(std::pair<int64_t, int64_t>{1, 512},
                                           std::pair<int64_t, int64_t>{7, 1536},
                                           std::pair<int64_t, int64_t>{33, 3584},
                                           std::pair<int64_t, int64_t>{5, 4096},
                                           std::pair<int64_t, int64_t>{2, 8192}));

}  // namespace
}  // namespace s4kv::backend
