// launch_int4_kivi_quantize against the CPU reference quantizer, byte for byte: every block
// size and value group size, random blocks with outliers and the edge cases of the exactness
// rules (constant channels, signed zeros, ties, an underflowing scale), with and without the
// v2 Hadamard values; the numpy goldens of tests/golden/kivi; and the commit from 16-bit cache
// bits (inverse RoPE, then the same quantizer). Skips without a device; int4_kivi_emulation_test
// builds this file with its kernels run on the CPU (backend/cuda/emulation.h), on every machine.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/device.h"
#include "backend/cuda/int4_kivi_dequantize.cuh"
#include "backend/cuda/int4_kivi_quantize.cuh"
#include "backend/rope_table.h"
#include "common/file.h"
#include "common/half.h"
#include "common/json.h"
#include "kv/hadamard.h"
#include "kv/int4_kivi_ref.h"

namespace s4kv::backend {
namespace {

constexpr int kD = 128;

// The CPU reference for n blocks: values rotated row by row first when hadamard.
std::vector<std::byte> reference(const kv::Int4KiviLayout& l, const std::vector<float>& keys,
                                 std::vector<float> values, int64_t n, bool hadamard) {
  const size_t per = static_cast<size_t>(l.block_size) * kD;
  if (hadamard) {
    for (size_t r = 0; r < values.size(); r += kD) {
      kv::hadamard_ref(std::span<float>(values.data() + r, kD));
    }
  }
  std::vector<std::byte> out(static_cast<size_t>(n) * l.block_bytes);
  for (int64_t i = 0; i < n; ++i) {
    kv::quantize_block_ref(l, std::span(keys).subspan(i * per, per),
                           std::span<const float>(values).subspan(i * per, per),
                           std::span(out).subspan(i * l.block_bytes, l.block_bytes));
  }
  return out;
}

std::vector<std::byte> device(const kv::Int4KiviLayout& l, const std::vector<float>& keys,
                              const std::vector<float>& values, int64_t n, bool hadamard) {
  cuda::DeviceBuffer dk(keys.size() * 4), dv(values.size() * 4),
      db(static_cast<size_t>(n) * l.block_bytes);
  dk.copy_from_host(keys.data(), keys.size() * 4);
  dv.copy_from_host(values.data(), values.size() * 4);
  cuda::Int4KiviQuantizeArgs a;
  a.keys = static_cast<const float*>(dk.data());
  a.values = static_cast<const float*>(dv.data());
  a.blocks = static_cast<std::byte*>(db.data());
  a.num_blocks = n;
  a.layout = l;
  a.value_hadamard = hadamard;
  cuda::launch_int4_kivi_quantize(a, nullptr);
  std::vector<std::byte> out(db.bytes());
  db.copy_to_host(out.data(), out.size());
  return out;
}

int64_t differing(const std::vector<std::byte>& a, const std::vector<std::byte>& b) {
  int64_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += a[i] != b[i];
  return n;
}

// Random blocks: Gaussian channels with log-normal spreads, Qwen-like offset channels, a
// sink-like outlier token, and edge cases in the first channels and tokens.
void fill(std::vector<float>& k, std::vector<float>& v, int b, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (int64_t i = 0; i < n; ++i) {
    float* kb = k.data() + i * b * kD;
    float* vb = v.data() + i * b * kD;
    for (int t = 0; t < b; ++t) {
      for (int c = 0; c < kD; ++c) {
        const float spread = std::exp(0.5f * static_cast<float>(c % 7) - 1.0f);
        kb[t * kD + c] = g(rng) * spread + (c % 29 == 11 ? 450.0f : 0.0f);
        vb[t * kD + c] = g(rng) * (t == 0 ? 30.0f : 1.0f);
      }
      kb[t * kD + 0] = static_cast<float>(t);             // a ramp
      kb[t * kD + 1] = 3.3f;                              // constant channel
      kb[t * kD + 2] = static_cast<float>(t) * 0x1p-30f;  // scale underflows fp16
      kb[t * kD + 3] = t % 2 == 0 ? -0.0f : 0.0f;         // signed zeros
      kb[t * kD + 4] = t == 0 ? 0.0f : (t == 1 ? 15.0f : static_cast<float>(t % 15) + 0.5f);
      vb[t * kD + 5] = 0.0f;
    }
    for (int c = 0; c < kD; ++c) vb[1 * kD + c] = -1.25f;  // a constant value row
    for (int c = 0; c < kD; ++c) vb[2 * kD + c] = c % 3 == 0 ? -0.0f : 0.0f;
  }
}

struct Shape {
  int block_size, gv;
  bool hadamard;
};

class Int4KiviQuantizeCuda : public ::testing::TestWithParam<Shape> {};

TEST_P(Int4KiviQuantizeCuda, BytesEqualTheCpuReference) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const Shape s = GetParam();
  auto l = kv::Int4KiviLayout::create(s.block_size, kD, s.gv);
  ASSERT_TRUE(l.is_ok());
  const int64_t n = 37;
  std::vector<float> k(static_cast<size_t>(n * s.block_size * kD)), v(k.size());
  fill(k, v, s.block_size, n, static_cast<uint32_t>(s.block_size * 1000 + s.gv + s.hadamard));
  const auto want = reference(*l, k, v, n, s.hadamard);
  const auto got = device(*l, k, v, n, s.hadamard);
  EXPECT_EQ(differing(got, want), 0) << "of " << want.size() << " bytes";
}

INSTANTIATE_TEST_SUITE_P(AllLayouts, Int4KiviQuantizeCuda,
                         ::testing::Values(Shape{32, 32, false}, Shape{32, 64, true},
                                           Shape{64, 128, false}, Shape{64, 128, true},
                                           Shape{64, 64, true}, Shape{128, 128, true},
                                           Shape{128, 64, false}, Shape{128, 32, true}));

TEST(Int4KiviQuantizeCudaGolden, MatchesNumpyGoldens) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  auto manifest = read_json_file("tests/golden/kivi/cases.json");
  ASSERT_TRUE(manifest.is_ok()) << manifest.status().message();
  for (const auto& c : manifest->at("cases")) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    auto l = kv::Int4KiviLayout::create(c.at("block_size").get<int>(), kD,
                                        c.at("value_group_size").get<int>());
    ASSERT_TRUE(l.is_ok());
    auto data = read_file("tests/golden/kivi/" + c.at("file").get<std::string>(), 1u << 20);
    ASSERT_TRUE(data.is_ok());
    const size_t n = static_cast<size_t>(l->block_size) * kD;
    std::vector<float> k(n), v(n);
    std::memcpy(k.data(), data->data(), n * 4);
    std::memcpy(v.data(), data->data() + n * 4, n * 4);
    const std::string want = data->substr(2 * n * 4);
    const auto got = device(*l, k, v, 1, c.value("value_hadamard", false));
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size()), 0);
  }
}

// The commit from the 16-bit cache's bits (keys after RoPE at each block's positions), as the
// CPU backend's kv_commit: widen, rope_unrotate with the shared table, Hadamard values,
// quantize. bf16 and fp16, Qwen's and Llama-3.1's RoPE frequencies, positions up to 131k.
struct CommitCase {
  int block_size, gv;
  bool bf16, hadamard, post_rope;
  float theta;
};

class Int4KiviCommitCuda : public ::testing::TestWithParam<CommitCase> {};

TEST_P(Int4KiviCommitCuda, BytesEqualTheCpuCommit) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const CommitCase p = GetParam();
  auto l = kv::Int4KiviLayout::create(p.block_size, kD, p.gv);
  ASSERT_TRUE(l.is_ok());
  const int b = p.block_size;
  const int64_t n = 9;
  std::mt19937 rng(static_cast<uint32_t>(b + p.gv + 7 * p.bf16 + 3 * p.hadamard));
  std::vector<int32_t> first(n);
  for (int64_t i = 0; i < n; ++i) {
    first[static_cast<size_t>(i)] = static_cast<int32_t>(i * 977 % (131072 / b - 1) * b);
  }
  first[1] = 131072 - b;  // a long context's last block
  std::vector<float> k(static_cast<size_t>(n * b * kD)), v(k.size());
  fill(k, v, b, n, 99);
  const auto to16 = [&](float x) { return p.bf16 ? float_to_bf16(x) : float_to_fp16(x); };
  const auto from16 = [&](uint16_t h) { return p.bf16 ? bf16_to_float(h) : fp16_to_float(h); };
  std::vector<uint16_t> k16(k.size()), v16(v.size());
  for (size_t i = 0; i < k.size(); ++i) {
    k16[i] = to16(k[i] * (p.bf16 ? 1.0f : 0.05f));  // fp16: keep the offsets in range
    v16[i] = to16(v[i]);
  }
  std::vector<float> inv_freq(kD / 2);
  for (int i = 0; i < kD / 2; ++i) {
    inv_freq[static_cast<size_t>(i)] =
        static_cast<float>(1.0 / std::pow(double{p.theta}, 2.0 * i / kD));
  }
  RopeTable rope(inv_freq);
  rope.ensure(131072);

  // CPU: what Int4KiviKvCache's commit feeds quantize_block_ref.
  std::vector<float> keys(k.size()), values(v.size());
  for (int64_t i = 0; i < n; ++i) {
    for (int t = 0; t < b; ++t) {
      const size_t r = static_cast<size_t>((i * b + t) * kD);
      for (int c = 0; c < kD; ++c) {
        keys[r + c] = from16(k16[r + c]);
        values[r + c] = from16(v16[r + c]);
      }
      if (!p.post_rope) {
        const int64_t pos = first[static_cast<size_t>(i)] + t;
        rope_unrotate(keys.data() + r, keys.data() + r, rope.cos(pos), rope.sin(pos), kD);
      }
    }
  }
  const auto want = reference(*l, keys, values, n, p.hadamard);

  cuda::DeviceBuffer dk(k16.size() * 2), dv(v16.size() * 2), dfirst(first.size() * 4),
      dcos(rope.cos_table().size() * 4), dsin(rope.sin_table().size() * 4),
      db(static_cast<size_t>(n) * l->block_bytes);
  dk.copy_from_host(k16.data(), k16.size() * 2);
  dv.copy_from_host(v16.data(), v16.size() * 2);
  dfirst.copy_from_host(first.data(), first.size() * 4);
  dcos.copy_from_host(rope.cos_table().data(), rope.cos_table().size() * 4);
  dsin.copy_from_host(rope.sin_table().data(), rope.sin_table().size() * 4);
  cuda::Int4KiviCommitArgs a;
  a.keys = static_cast<const uint16_t*>(dk.data());
  a.values = static_cast<const uint16_t*>(dv.data());
  a.bf16 = p.bf16;
  a.first_position = static_cast<const int32_t*>(dfirst.data());
  a.cos = static_cast<const float*>(dcos.data());
  a.sin = static_cast<const float*>(dsin.data());
  a.num_positions = rope.num_positions();
  a.keys_post_rope = p.post_rope;
  a.blocks = static_cast<std::byte*>(db.data());
  a.num_blocks = n;
  a.layout = *l;
  a.value_hadamard = p.hadamard;
  cuda::launch_int4_kivi_commit(a, nullptr);
  std::vector<std::byte> got(db.bytes());
  db.copy_to_host(got.data(), got.size());
  EXPECT_EQ(differing(got, want), 0) << "of " << want.size() << " bytes";
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, Int4KiviCommitCuda,
    ::testing::Values(CommitCase{64, 128, true, true, false, 1e6f},   // v2, Qwen2.5
                      CommitCase{64, 128, true, true, false, 5e5f},   // v2, Llama-3
                      CommitCase{64, 128, false, true, false, 1e4f},  // fp16 model
                      CommitCase{32, 64, true, false, false, 1e6f},   // v1 layouts
                      CommitCase{128, 32, true, true, false, 1e6f},
                      CommitCase{64, 128, true, false, true, 1e6f}));  // post-RoPE keys

// Blocks quantized by the CPU reference read back on the device: keys and values bit for bit
// dequantize_*_block_ref's, every layout; and the Hadamard rows transform bit for bit
// hadamard_ref's (attention's once-per-head rotation back for v2).
TEST_P(Int4KiviQuantizeCuda, DequantizeEqualsTheCpuReference) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const Shape s = GetParam();
  auto l = kv::Int4KiviLayout::create(s.block_size, kD, s.gv);
  ASSERT_TRUE(l.is_ok());
  const int64_t n = 11;
  const size_t per = static_cast<size_t>(s.block_size) * kD;
  std::vector<float> k(n * per), v(k.size());
  fill(k, v, s.block_size, n, static_cast<uint32_t>(s.block_size * 7 + s.gv));
  const auto blocks = reference(*l, k, v, n, s.hadamard);
  std::vector<float> want_k(k.size()), want_v(v.size());
  for (int64_t i = 0; i < n; ++i) {
    const auto blk = std::span(blocks).subspan(i * l->block_bytes, l->block_bytes);
    kv::dequantize_keys_block_ref(*l, blk, std::span(want_k).subspan(i * per, per));
    kv::dequantize_values_block_ref(*l, blk, std::span(want_v).subspan(i * per, per));
  }
  cuda::DeviceBuffer db(blocks.size()), dk(k.size() * 4), dv(v.size() * 4);
  db.copy_from_host(blocks.data(), blocks.size());
  cuda::Int4KiviDequantizeArgs a;
  a.blocks = static_cast<const std::byte*>(db.data());
  a.keys = static_cast<float*>(dk.data());
  a.values = static_cast<float*>(dv.data());
  a.num_blocks = n;
  a.layout = *l;
  cuda::launch_int4_kivi_dequantize(a, nullptr);
  std::vector<float> got_k(k.size()), got_v(v.size());
  dk.copy_to_host(got_k.data(), got_k.size() * 4);
  dv.copy_to_host(got_v.data(), got_v.size() * 4);
  EXPECT_EQ(std::memcmp(got_k.data(), want_k.data(), got_k.size() * 4), 0);
  EXPECT_EQ(std::memcmp(got_v.data(), want_v.data(), got_v.size() * 4), 0);

  // Hadamard rows: the dequantized values rotated back.
  std::vector<float> want_rows = want_v;
  for (size_t r = 0; r < want_rows.size(); r += kD) {
    kv::hadamard_ref(std::span<float>(want_rows.data() + r, kD));
  }
  cuda::launch_hadamard128_rows(a.values, static_cast<int64_t>(want_v.size() / kD), nullptr);
  dv.copy_to_host(got_v.data(), got_v.size() * 4);
  EXPECT_EQ(std::memcmp(got_v.data(), want_rows.data(), got_v.size() * 4), 0);
}

}  // namespace
}  // namespace s4kv::backend
