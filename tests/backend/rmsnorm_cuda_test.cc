// launch_row_rmsnorm (the CUDA backend's RMSNorm: fp32 residual rows in, the compute dtype out,
// optionally only listed rows) against the CPU reference on fresh random inputs, odd shapes, both
// of the kernel's paths (the row in registers up to 8,192 values, a loop past that).
// Skips without a device.
// forward_emulation_test builds this file with its kernels run on the CPU
// (backend/cuda/emulation.h), on every machine.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <tuple>
#include <vector>

#include "backend/cpu/rmsnorm.h"
#include "backend/cuda/device.h"
#include "backend/cuda/forward_kernels.cuh"
#include "common/half.h"

namespace s4kv::backend {
namespace {

class RmsnormCuda : public ::testing::TestWithParam<std::tuple<int64_t, int64_t, DType, bool>> {};

TEST_P(RmsnormCuda, MatchesCpuReference) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const auto [num_tokens, hidden, out_dtype, listed_rows] = GetParam();
  std::mt19937 rng(static_cast<unsigned>(num_tokens * 131 + hidden));
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<float> x(static_cast<size_t>(num_tokens * hidden)), w(static_cast<size_t>(hidden));
  for (auto& v : x) v = dist(rng);
  for (auto& v : w) v = 1.0f + 0.1f * dist(rng);
  // The LM head's use: some rows, in any order, a row twice.
  std::vector<int32_t> rows;
  if (listed_rows) {
    std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(num_tokens - 1));
    for (int64_t i = 0; i < num_tokens / 2 + 1; ++i) rows.push_back(pick(rng));
    rows.push_back(rows.front());
  } else {
    for (int32_t i = 0; i < num_tokens; ++i) rows.push_back(i);
  }
  const auto n = static_cast<int64_t>(rows.size());
  std::vector<float> in(static_cast<size_t>(n * hidden)), ref(in.size());
  for (int64_t r = 0; r < n; ++r) {
    std::copy_n(x.begin() + rows[static_cast<size_t>(r)] * hidden, hidden, in.begin() + r * hidden);
  }
  cpu::rmsnorm_ref(in, w, 1e-6f, n, hidden, ref);

  const size_t es = out_dtype == DType::kF32 ? 4 : 2;
  cuda::DeviceBuffer dx(x.size() * 4), dw(w.size() * 4), drows(rows.size() * 4),
      dout(static_cast<size_t>(n * hidden) * es);
  dx.copy_from_host(x.data(), x.size() * 4);
  dw.copy_from_host(w.data(), w.size() * 4);
  drows.copy_from_host(rows.data(), rows.size() * 4);
  cuda::RowNormArgs args;
  args.x = static_cast<const float*>(dx.data());
  args.rows = listed_rows ? static_cast<const int32_t*>(drows.data()) : nullptr;
  args.weight = static_cast<const float*>(dw.data());
  args.out = dout.data();
  args.act_dtype = out_dtype;
  args.num_rows = n;
  args.hidden = hidden;
  args.eps = 1e-6f;
  cuda::launch_row_rmsnorm(args, nullptr);
  std::vector<uint16_t> got16(static_cast<size_t>(n * hidden));
  std::vector<float> got32(got16.size());
  if (es == 4) {
    dout.copy_to_host(got32.data(), got32.size() * 4);
  } else {
    dout.copy_to_host(got16.data(), got16.size() * 2);
    for (size_t i = 0; i < got16.size(); ++i) {
      got32[i] = out_dtype == DType::kBF16 ? bf16_to_float(got16[i]) : fp16_to_float(got16[i]);
    }
  }
  // The device sums in another order (fp32: a few ulps of the norm), then rounds to the
  // output dtype: one bf16 / fp16 ulp, plus a tiny absolute slack.
  const float rel = out_dtype == DType::kF32    ? 1e-5f
                    : out_dtype == DType::kBF16 ? 1.0f / 128
                                                : 1.0f / 1024;
  for (size_t i = 0; i < got32.size(); ++i) {
    ASSERT_NEAR(got32[i], ref[i], std::fabs(ref[i]) * rel + 1e-6f) << "at " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, RmsnormCuda,
    ::testing::Values(std::tuple{int64_t{1}, int64_t{512}, DType::kBF16, false},
                      std::tuple{int64_t{7}, int64_t{1536}, DType::kF32, true},
                      std::tuple{int64_t{33}, int64_t{3584}, DType::kBF16, true},
                      std::tuple{int64_t{5}, int64_t{4096}, DType::kF16, false},
                      std::tuple{int64_t{2}, int64_t{8192}, DType::kF32, false},
                      std::tuple{int64_t{19}, int64_t{256}, DType::kF16, true},
                      // Past the registers' 8,192 values a row: the kernel's loop.
                      std::tuple{int64_t{3}, int64_t{8200}, DType::kF32, true},
                      std::tuple{int64_t{1}, int64_t{10000}, DType::kBF16, false}));

}  // namespace
}  // namespace s4kv::backend
