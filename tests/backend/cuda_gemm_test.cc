// Gemm::run (the CUDA backend's linear layers) against a double-precision reference on the
// host: the few-row path (skinny_gemm.cuh, n <= 8: every row count, both 16-bit dtypes, odd
// output counts, `in` a multiple of 8 but not of 256, overwrite and accumulate) and cuBLASLt
// (n = 9, 16), each with and without a bias added after the product. Bound per output: 5e-5 x the
// sum of |x * w| over the row (fp32 accumulation in another order); a wrong row, column or dtype
// moves an output by about that sum. Skips without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <tuple>
#include <utility>
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

// run_silu_mul's epilogue (a warp takes a gate row and its up row) against run then
// launch_silu_mul, bit for bit: every few-row count and the cuBLASLt fallback (9), both 16-bit
// dtypes, the 7B model's sizes and odd ones.
TEST(GemmCudaEpilogues, SiluMulEqualsSeparateKernelsBitForBit) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  for (const DType dtype : {DType::kBF16, DType::kF16}) {
    for (const auto& [in, out] : {std::pair<int64_t, int64_t>{3584, 3584}, {1096, 203}}) {
      for (const int64_t n : {int64_t{1}, int64_t{2}, int64_t{5}, int64_t{8}, int64_t{9}}) {
        SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " n " << n << " in " << in);
        std::mt19937 rng(static_cast<unsigned>(n * 131 + in));
        std::normal_distribution<float> dist(0.0f, 1.0f);
        const bool bf16 = dtype == DType::kBF16;
        const auto to16 = [&](float f) { return bf16 ? float_to_bf16(f) : float_to_fp16(f); };
        std::vector<uint16_t> x(static_cast<size_t>(n * in)), w(static_cast<size_t>(out * in));
        for (auto& v : x) v = to16(dist(rng));
        for (auto& v : w) v = to16(0.05f * dist(rng));
        cuda::DeviceBuffer dx(x.size() * 2), dw(w.size() * 2);
        dx.copy_from_host(x.data(), dx.bytes());
        dw.copy_from_host(w.data(), dw.bytes());
        cuda::Gemm gemm(dtype, stream);
        // w as [gate; up] of inter = out / 2 (out rounded down to even).
        const int64_t inter = out / 2;
        std::vector<std::vector<uint16_t>> acts;
        for (const bool fused : {false, true}) {
          cuda::DeviceBuffer dy(static_cast<size_t>(n * 2 * inter) * 4),
              da(static_cast<size_t>(n * inter) * 2);
          ASSERT_EQ(cudaMemset(da.data(), 0, da.bytes()), cudaSuccess);
          auto* y = static_cast<float*>(dy.data());
          if (fused) {
            gemm.run_silu_mul(dx.data(), dw.data(), y, da.data(), n, in, inter);
          } else {
            gemm.run(dx.data(), dw.data(), y, n, in, 2 * inter, false);
            cuda::launch_silu_mul(y, da.data(), dtype, n, inter, stream);
          }
          ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
          acts.emplace_back(static_cast<size_t>(n * inter));
          da.copy_to_host(acts.back().data(), da.bytes());
        }
        EXPECT_EQ(std::memcmp(acts[0].data(), acts[1].data(), acts[0].size() * 2), 0) << "silu";
        EXPECT_TRUE(std::any_of(acts[0].begin(), acts[0].end(), [](uint16_t v) { return v != 0; }));
      }
    }
  }
  ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

// run_rope_kv's epilogue (a warp per rotate-half pair: the bias, RoPE of query and K heads, y and
// the K / V caches written) against run then launch_rope_kv_write, bit for bit: y and both caches
// for every store (bf16, fp16, fp8 from either), with a slot mapping and without (int4_kivi's
// staging), the 7B model's heads (28 / 4) and a small shape, every few-row count and the
// cuBLASLt fallback (9).
TEST(GemmCudaEpilogues, RopeKvEqualsSeparateKernelsBitForBit) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  constexpr int64_t kPositions = 4096, kHalf = 64;
  std::vector<float> cos(kPositions * kHalf), sin(kPositions * kHalf);
  for (int64_t p = 0; p < kPositions; ++p) {
    for (int64_t i = 0; i < kHalf; ++i) {
      const double a = static_cast<double>(p) * std::pow(10000.0, -static_cast<double>(i) / kHalf);
      cos[p * kHalf + i] = static_cast<float>(std::cos(a));
      sin[p * kHalf + i] = static_cast<float>(std::sin(a));
    }
  }
  cuda::DeviceBuffer dcos(cos.size() * 4), dsin(sin.size() * 4);
  dcos.copy_from_host(cos.data(), dcos.bytes());
  dsin.copy_from_host(sin.data(), dsin.bytes());
  struct Store {
    DType cache, from;
  };
  for (const DType dtype : {DType::kBF16, DType::kF16}) {
    for (const auto& [nq, nkv] : {std::pair<int64_t, int64_t>{28, 4}, {2, 1}}) {
      for (const Store st :
           {Store{DType::kBF16, DType::kBF16}, Store{DType::kF16, DType::kF16},
            Store{DType::kF8E4M3, DType::kBF16}, Store{DType::kF8E4M3, DType::kF16}}) {
        for (const bool with_slots : {true, false}) {
          for (const int64_t n : {int64_t{1}, int64_t{2}, int64_t{5}, int64_t{8}, int64_t{9}}) {
            SCOPED_TRACE(testing::Message()
                         << dtype_name(dtype) << " heads " << nq << "/" << nkv << " cache "
                         << dtype_name(st.cache) << " from " << dtype_name(st.from) << " slots "
                         << with_slots << " n " << n);
            const int64_t in = 264, out = 128 * (nq + 2 * nkv), kv_dim = 128 * nkv;
            std::mt19937 rng(static_cast<unsigned>(n * 17 + nq + with_slots));
            std::normal_distribution<float> dist(0.0f, 1.0f);
            const bool bf16 = dtype == DType::kBF16;
            std::vector<uint16_t> x(static_cast<size_t>(n * in)), w(static_cast<size_t>(out * in));
            for (auto& v : x) v = bf16 ? float_to_bf16(dist(rng)) : float_to_fp16(dist(rng));
            for (auto& v : w) {
              v = bf16 ? float_to_bf16(0.1f * dist(rng)) : float_to_fp16(0.1f * dist(rng));
            }
            std::vector<float> bias(static_cast<size_t>(out));
            for (auto& v : bias) v = dist(rng);
            std::vector<int32_t> positions(static_cast<size_t>(n));
            std::vector<int64_t> slots(static_cast<size_t>(n));
            for (int64_t m = 0; m < n; ++m) {
              positions[static_cast<size_t>(m)] = static_cast<int32_t>(rng() % kPositions);
              slots[static_cast<size_t>(m)] = (m * 7 + 3) % 16;  // distinct, out of order
            }
            cuda::DeviceBuffer dx(x.size() * 2), dw(w.size() * 2), db(bias.size() * 4),
                dpos(positions.size() * 4), dslots(slots.size() * 8);
            dx.copy_from_host(x.data(), dx.bytes());
            dw.copy_from_host(w.data(), dw.bytes());
            db.copy_from_host(bias.data(), db.bytes());
            dpos.copy_from_host(positions.data(), dpos.bytes());
            dslots.copy_from_host(slots.data(), dslots.bytes());
            const int64_t es = st.cache == DType::kF8E4M3 ? 1 : 2;
            const size_t cache_bytes = static_cast<size_t>(16 * kv_dim * es);
            cuda::Gemm gemm(dtype, stream);
            std::vector<std::vector<uint8_t>> results;  // y, K cache, V cache per way
            for (const bool fused : {false, true}) {
              cuda::DeviceBuffer dy(static_cast<size_t>(n * out) * 4), dk(cache_bytes),
                  dv(cache_bytes);
              ASSERT_EQ(cudaMemset(dk.data(), 0, cache_bytes), cudaSuccess);
              ASSERT_EQ(cudaMemset(dv.data(), 0, cache_bytes), cudaSuccess);
              auto* y = static_cast<float*>(dy.data());
              cuda::RopeArgs rope;
              rope.x = y;
              rope.row_stride = out;
              rope.positions = static_cast<const int32_t*>(dpos.data());
              rope.cos = static_cast<const float*>(dcos.data());
              rope.sin = static_cast<const float*>(dsin.data());
              rope.num_tokens = n;
              rope.num_heads = nq + nkv;
              rope.head_dim = 128;
              cuda::KvWriteArgs kv;
              kv.k = y + nq * 128;
              kv.v = kv.k + kv_dim;
              kv.row_stride = out;
              kv.slot_mapping = with_slots ? static_cast<const int64_t*>(dslots.data()) : nullptr;
              kv.k_cache = dk.data();
              kv.v_cache = dv.data();
              kv.cache_dtype = st.cache;
              kv.fp8_from = st.from;
              kv.num_tokens = n;
              kv.kv_dim = kv_dim;
              const auto* b = static_cast<const float*>(db.data());
              if (fused) {
                gemm.run_rope_kv(dx.data(), dw.data(), y, n, in, out, b, rope, nq, kv);
              } else {
                gemm.run(dx.data(), dw.data(), y, n, in, out, false, b);
                cuda::launch_rope_kv_write(rope, nq, kv, stream);
              }
              ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
              for (const cuda::DeviceBuffer* buf : {&dy, &dk, &dv}) {
                results.emplace_back(buf->bytes());
                buf->copy_to_host(results.back().data(), buf->bytes());
              }
            }
            for (int k = 0; k < 3; ++k) {
              EXPECT_EQ(results[static_cast<size_t>(k)], results[static_cast<size_t>(k + 3)])
                  << (k == 0   ? "y"
                      : k == 1 ? "K cache"
                               : "V cache");
              EXPECT_TRUE(std::any_of(results[static_cast<size_t>(k)].begin(),
                                      results[static_cast<size_t>(k)].end(),
                                      [](uint8_t v) { return v != 0; }));
            }
          }
        }
      }
    }
  }
  ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

}  // namespace
}  // namespace s4kv::backend
