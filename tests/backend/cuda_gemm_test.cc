// Gemm::run (the CUDA backend's linear layers) against a double-precision reference on the
// host: the few-row path (skinny_gemm.cuh, n <= 8: every row count, both 16-bit dtypes, odd
// output counts, `in` a multiple of 8 but not of 256, overwrite and accumulate) and cuBLASLt
// (n = 9, 16), each with and without a bias added after the product. Bound per output: 5e-5 x the
// sum of |x * w| over the row (fp32 accumulation in another order); a wrong row, column or dtype
// moves an output by about that sum. Skips without a device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "backend/cuda/device.h"
#include "backend/cuda/gemm.h"
#include "common/half.h"

namespace s4kv::backend {
namespace {

class GemmCuda
    : public ::testing::TestWithParam<std::tuple<DType, int64_t, int64_t, int64_t, bool, bool>> {};

TEST_P(GemmCuda, MatchesDoubleReference) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const auto [dtype, n, in, out, accumulate, with_bias] = GetParam();
  const bool bf16 = dtype == DType::kBF16;
  std::mt19937 rng(static_cast<unsigned>(n * 7919 + in * 31 + out));
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const auto to16 = [&](float f) { return bf16 ? float_to_bf16(f) : float_to_fp16(f); };
  const auto from16 = [&](uint16_t h) { return bf16 ? bf16_to_float(h) : fp16_to_float(h); };
  std::vector<uint16_t> x(static_cast<size_t>(n * in)), w(static_cast<size_t>(out * in));
  for (auto& v : x) v = to16(dist(rng));
  for (auto& v : w) v = to16(0.05f * dist(rng));
  std::vector<float> y0(static_cast<size_t>(n * out));
  for (auto& v : y0) v = dist(rng);
  std::vector<float> bias(static_cast<size_t>(out));
  for (auto& v : bias) v = dist(rng);

  cuda::DeviceBuffer dx(x.size() * 2), dw(w.size() * 2), dy(y0.size() * 4), db(bias.size() * 4);
  db.copy_from_host(bias.data(), bias.size() * 4);
  dx.copy_from_host(x.data(), x.size() * 2);
  dw.copy_from_host(w.data(), w.size() * 2);
  dy.copy_from_host(y0.data(), y0.size() * 4);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  {
    cuda::Gemm gemm(dtype, stream);
    gemm.run(dx.data(), dw.data(), static_cast<float*>(dy.data()), n, in, out, accumulate,
             with_bias ? static_cast<const float*>(db.data()) : nullptr);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  }
  ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  std::vector<float> y(y0.size());
  dy.copy_to_host(y.data(), y.size() * 4);

  double worst = 0.0;
  for (int64_t m = 0; m < n; ++m) {
    for (int64_t o = 0; o < out; ++o) {
      double sum = 0.0, mag = 0.0;
      for (int64_t k = 0; k < in; ++k) {
        const double p = static_cast<double>(from16(x[m * in + k])) * from16(w[o * in + k]);
        sum += p;
        mag += std::fabs(p);
      }
      const size_t at = static_cast<size_t>(m * out + o);
      if (accumulate) sum += y0[at];
      const double b = with_bias ? bias[static_cast<size_t>(o)] : 0.0;
      sum += b;
      const double err = std::fabs(y[at] - sum) / (mag + 1e-30);
      worst = std::max(worst, err);
      ASSERT_LE(std::fabs(y[at] - sum), 5e-5 * mag + 1e-6 * (std::fabs(y0[at]) + std::fabs(b)))
          << "row " << m << " output " << o << ": " << y[at] << " vs " << sum;
    }
  }
  RecordProperty("worst_relative_to_magnitude", std::to_string(worst));
}

INSTANTIATE_TEST_SUITE_P(FewRowsAndCublas, GemmCuda,
                         ::testing::Combine(::testing::Values(DType::kBF16, DType::kF16),
                                            ::testing::Values(int64_t{1}, int64_t{2}, int64_t{3},
                                                              int64_t{5}, int64_t{8}, int64_t{9},
                                                              int64_t{16}),
                                            ::testing::Values(int64_t{1032}, int64_t{72}),
                                            ::testing::Values(int64_t{777}, int64_t{17}),
                                            ::testing::Bool(), ::testing::Bool()));

// run_normed with S4KV_NORM_FUSION=1 (the RMSNorm made inside the few-row GEMM's blocks) against
// launch_row_rmsnorm then run, bit for bit: every few-row count and the cuBLASLt fallback (9),
// both 16-bit dtypes, a hidden size of the 7B model and an odd one, with accumulation and bias.
TEST(GemmCudaNormed, EqualsRmsNormThenRunBitForBit) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  for (const DType dtype : {DType::kBF16, DType::kF16}) {
    for (const int64_t in : {int64_t{3584}, int64_t{1096}}) {
      for (const int64_t n : {int64_t{1}, int64_t{2}, int64_t{5}, int64_t{8}, int64_t{9}}) {
        SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " n " << n << " in " << in);
        const int64_t out = 203;
        std::mt19937 rng(static_cast<unsigned>(n * 131 + in));
        std::normal_distribution<float> dist(0.0f, 1.0f);
        const bool bf16 = dtype == DType::kBF16;
        std::vector<float> x(static_cast<size_t>(n * in)), nw(static_cast<size_t>(in)),
            y0(static_cast<size_t>(n * out)), bias(static_cast<size_t>(out));
        for (auto& v : x) v = 3.0f * dist(rng);
        for (auto& v : nw) v = 1.0f + 0.2f * dist(rng);
        for (auto& v : y0) v = dist(rng);
        for (auto& v : bias) v = dist(rng);
        std::vector<uint16_t> w(static_cast<size_t>(out * in));
        for (auto& v : w)
          v = bf16 ? float_to_bf16(0.05f * dist(rng)) : float_to_fp16(0.05f * dist(rng));
        cuda::DeviceBuffer dx(x.size() * 4), dnw(nw.size() * 4), dw(w.size() * 2),
            db(bias.size() * 4), dh(x.size() * 2);
        dx.copy_from_host(x.data(), dx.bytes());
        dnw.copy_from_host(nw.data(), dnw.bytes());
        dw.copy_from_host(w.data(), dw.bytes());
        db.copy_from_host(bias.data(), db.bytes());
        cudaStream_t stream = nullptr;
        ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
        std::vector<std::vector<float>> results;
        for (const bool fused : {false, true}) {
          cuda::DeviceBuffer dy(y0.size() * 4);
          dy.copy_from_host(y0.data(), dy.bytes());
          cuda::RowNormArgs norm{static_cast<const float*>(dx.data()),
                                 nullptr,
                                 static_cast<const float*>(dnw.data()),
                                 dh.data(),
                                 dtype,
                                 n,
                                 in,
                                 1e-6f};
          {
            // The fused path is opt-in (gemm.h); Gemm reads the switch when it is made.
            if (fused) {
              setenv("S4KV_NORM_FUSION", "1", 1);
            } else {
              unsetenv("S4KV_NORM_FUSION");
            }
            cuda::Gemm gemm(dtype, stream);
            unsetenv("S4KV_NORM_FUSION");
            auto* y = static_cast<float*>(dy.data());
            const auto* b = static_cast<const float*>(db.data());
            if (fused) {
              gemm.run_normed(norm, dw.data(), y, out, true, b);
            } else {
              cuda::launch_row_rmsnorm(norm, stream);
              gemm.run(dh.data(), dw.data(), y, n, in, out, true, b);
            }
            ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
          }
          std::vector<float> y(y0.size());
          dy.copy_to_host(y.data(), y.size() * 4);
          results.push_back(std::move(y));
        }
        ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
        EXPECT_EQ(std::memcmp(results[0].data(), results[1].data(), results[0].size() * 4), 0);
        EXPECT_NE(std::memcmp(results[0].data(), y0.data(), y0.size() * 4), 0) << "no output";
      }
    }
  }
}

}  // namespace
}  // namespace s4kv::backend
