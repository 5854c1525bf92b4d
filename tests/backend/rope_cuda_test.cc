// launch_rope against rope_rotate (the CPU path's rotation, equal to rope_ref), bit for bit:
// query- and key-like head counts, odd token counts, random positions up to 32k, Qwen2.5 and
// Llama-3 RoPE bases, head_dim 64 and 128. And launch_rope_kv_write against launch_rope then
// launch_kv_write (rows, caches and every cache dtype, with and without slots), bit for bit.
// Skips without a device.
// forward_emulation_test builds this file with its kernels run on the CPU
// (backend/cuda/emulation.h), on every machine.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cuda/device.h"
#include "backend/cuda/forward_kernels.cuh"
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

// qkv rows of 7 query, 2 K and 2 V heads (a row stride with room after them), 9 tokens at
// random positions; the caches of 40 rows, the tokens' slots scattered or (null) rows 0..8.
TEST(RopeKvWriteCuda, EqualsRopeThenKvWriteBitForBit) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const int64_t tokens = 9, q_heads = 7, kv_heads = 2, d = 128, half = d / 2;
  const int64_t kv_dim = kv_heads * d, stride = (q_heads + 2 * kv_heads) * d + 16;
  std::vector<float> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    inv_freq[static_cast<size_t>(i)] = static_cast<float>(
        1.0 / std::pow(1e6, 2.0 * static_cast<double>(i) / static_cast<double>(d)));
  }
  RopeTable table(inv_freq);
  table.ensure(4096);
  std::mt19937 rng(11);
  std::normal_distribution<float> g(0.0f, 3.0f);
  std::vector<float> x(static_cast<size_t>(tokens * stride));
  for (float& v : x) v = g(rng);
  std::vector<int32_t> pos(static_cast<size_t>(tokens));
  for (auto& q : pos) q = static_cast<int32_t>(rng() % 4096);
  const std::vector<int64_t> slots = {31, 2, 17, 39, 0, 8, 25, 13, 6};
  cuda::DeviceBuffer dp(pos.size() * 4), dc(table.cos_table().size() * 4),
      ds(table.sin_table().size() * 4), dslots(slots.size() * 8);
  dp.copy_from_host(pos.data(), pos.size() * 4);
  dc.copy_from_host(table.cos_table().data(), dc.bytes());
  ds.copy_from_host(table.sin_table().data(), ds.bytes());
  dslots.copy_from_host(slots.data(), dslots.bytes());
  for (const DType cache : {DType::kBF16, DType::kF16, DType::kF8E4M3}) {
    for (const bool with_slots : {true, false}) {
      SCOPED_TRACE(testing::Message() << dtype_name(cache) << (with_slots ? " slots" : " rows"));
      const size_t cache_bytes = static_cast<size_t>(40 * kv_dim * dtype_size(cache));
      std::vector<std::vector<unsigned char>> rows_out, caches_out;
      for (const bool fused : {false, true}) {
        cuda::DeviceBuffer dx(x.size() * 4), kc(cache_bytes), vc(cache_bytes);
        dx.copy_from_host(x.data(), x.size() * 4);
        const std::vector<unsigned char> zero(cache_bytes, 0x5a);
        kc.copy_from_host(zero.data(), cache_bytes);
        vc.copy_from_host(zero.data(), cache_bytes);
        cuda::RopeArgs r;
        r.x = static_cast<float*>(dx.data());
        r.row_stride = stride;
        r.positions = static_cast<const int32_t*>(dp.data());
        r.cos = static_cast<const float*>(dc.data());
        r.sin = static_cast<const float*>(ds.data());
        r.num_tokens = tokens;
        r.num_heads = q_heads + kv_heads;
        r.head_dim = d;
        cuda::KvWriteArgs w;
        w.k = r.x + q_heads * d;
        w.v = w.k + kv_dim;
        w.row_stride = stride;
        w.slot_mapping = with_slots ? static_cast<const int64_t*>(dslots.data()) : nullptr;
        w.k_cache = kc.data();
        w.v_cache = vc.data();
        w.cache_dtype = cache;
        w.fp8_from = DType::kBF16;
        w.num_tokens = tokens;
        w.kv_dim = kv_dim;
        if (fused) {
          cuda::launch_rope_kv_write(r, q_heads, w, nullptr);
        } else {
          cuda::launch_rope(r, nullptr);
          cuda::launch_kv_write(w, nullptr);
        }
        std::vector<unsigned char> rows(x.size() * 4), both(2 * cache_bytes);
        dx.copy_to_host(rows.data(), rows.size());
        kc.copy_to_host(both.data(), cache_bytes);
        vc.copy_to_host(both.data() + cache_bytes, cache_bytes);
        rows_out.push_back(std::move(rows));
        caches_out.push_back(std::move(both));
      }
      EXPECT_TRUE(rows_out[0] == rows_out[1]) << "rotated rows differ";
      EXPECT_TRUE(caches_out[0] == caches_out[1]) << "caches differ";
      EXPECT_NE(caches_out[0], std::vector<unsigned char>(2 * cache_bytes, 0x5a)) << "no write";
    }
  }
}

}  // namespace
}  // namespace s4kv::backend
