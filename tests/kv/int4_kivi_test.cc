// int4_kivi layout and CPU reference: offsets, nibble order, hand-computed blocks, the
// fp16-rounding edge cases the clamp exists for, determinism and round-trip error bounds on
// random data for every (B, Gv), and the value-rotation candidate's Hadamard transform. The
// byte-for-byte comparison with numpy is in int4_kivi_golden_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/half.h"
#include "kv/hadamard.h"
#include "kv/int4_kivi_layout.h"
#include "kv/int4_kivi_ref.h"
#include "kv/kv_format.h"

namespace s4kv::kv {
namespace {

constexpr int kD = 128;

Int4KiviLayout make_layout(int b, int gv) {
  auto l = Int4KiviLayout::create(b, kD, gv);
  S4KV_CHECK(l.is_ok(), l.status().message());
  return *l;
}

// A quantized block with convenient accessors.
struct Block {
  Int4KiviLayout l;
  std::vector<std::byte> bytes;

  Block(const Int4KiviLayout& layout, const std::vector<float>& k, const std::vector<float>& v)
      : l(layout), bytes(layout.block_bytes, std::byte{0xa5}) {
    quantize_block_ref(l, k, v, bytes);
  }
  std::span<const std::byte> part(size_t offset, size_t size) const {
    return std::span<const std::byte>(bytes).subspan(offset, size);
  }
  uint8_t k_code(int t, int c) const {
    return read_int4_code(part(l.k_codes_offset, l.codes_bytes), kD, t, c);
  }
  uint8_t v_code(int t, int c) const {
    return read_int4_code(part(l.v_codes_offset, l.codes_bytes), kD, t, c);
  }
  uint16_t k_scale(int c) const { return read_fp16(part(l.k_scale_offset, l.k_params_bytes), c); }
  uint16_t k_zero(int c) const { return read_fp16(part(l.k_zero_offset, l.k_params_bytes), c); }
  uint16_t v_scale(int t, int g) const {
    return read_fp16(part(l.v_scale_offset, l.v_params_bytes), t * l.num_value_groups() + g);
  }
  uint16_t v_zero(int t, int g) const {
    return read_fp16(part(l.v_zero_offset, l.v_params_bytes), t * l.num_value_groups() + g);
  }
  std::vector<float> keys() const {
    std::vector<float> out(static_cast<size_t>(l.block_size * kD));
    dequantize_keys_block_ref(l, bytes, out);
    return out;
  }
  std::vector<float> values() const {
    std::vector<float> out(static_cast<size_t>(l.block_size * kD));
    dequantize_values_block_ref(l, bytes, out);
    return out;
  }
};

std::vector<float> zeros(int b) { return std::vector<float>(static_cast<size_t>(b * kD), 0.0f); }

TEST(Int4KiviLayout, OffsetsForDefaultLayout) {
  const Int4KiviLayout l = make_layout(64, 128);
  EXPECT_EQ(l.k_codes_offset, 0u);
  EXPECT_EQ(l.k_scale_offset, 4096u);
  EXPECT_EQ(l.k_zero_offset, 4352u);
  EXPECT_EQ(l.v_codes_offset, 4608u);
  EXPECT_EQ(l.v_scale_offset, 8704u);
  EXPECT_EQ(l.v_zero_offset, 8832u);
  EXPECT_EQ(l.block_bytes, 8960u);  // 140 bytes per token
  EXPECT_EQ(l.num_value_groups(), 1);
  EXPECT_EQ(l.words_per_token(), 16);
}

TEST(Int4KiviLayout, EveryLayoutMatchesBytesPerTokenAndIsAligned) {
  for (int b : kAllowedBlockSizes) {
    for (int gv : kAllowedValueGroupSizes) {
      SCOPED_TRACE("B=" + std::to_string(b) + " Gv=" + std::to_string(gv));
      const Int4KiviLayout l = make_layout(b, gv);
      EXPECT_EQ(static_cast<double>(l.block_bytes),
                kv_bytes_per_token(KvCacheDtype::kInt4Kivi, 1, 1, kD, b, gv) * b);
      EXPECT_EQ(l.codes_bytes, static_cast<size_t>(b * kD / 2));
      EXPECT_EQ(l.v_params_bytes, static_cast<size_t>(b * (kD / gv) * 2));
      for (size_t off : {l.k_scale_offset, l.k_zero_offset, l.v_codes_offset, l.v_scale_offset,
                         l.v_zero_offset}) {
        EXPECT_EQ(off % 64, 0u) << off;
      }
      EXPECT_EQ(l.block_bytes % 128, 0u);
      EXPECT_EQ(l.v_zero_offset + l.v_params_bytes, l.block_bytes);
    }
  }
}

TEST(Int4KiviLayout, RefusesBadShapesNamingTheValue) {
  EXPECT_EQ(Int4KiviLayout::create(48, 128, 128).status().message(),
            "unsupported block_size=48 (supported: 32, 64, 128)");
  EXPECT_EQ(Int4KiviLayout::create(64, 128, 16).status().message(),
            "unsupported value_group_size=16 (supported: 32, 64, 128)");
  const auto bad = Int4KiviLayout::create(64, 96, 64);
  EXPECT_EQ(bad.status().code(), StatusCode::kUnsupported);
  EXPECT_EQ(bad.status().message(),
            "unsupported head_dim=96 for int4_kivi (a positive multiple of 8 and of "
            "value_group_size=64)");
  EXPECT_FALSE(Int4KiviLayout::create(64, 0, 32).is_ok());
  EXPECT_TRUE(Int4KiviLayout::create(32, 64, 32).is_ok());
}

TEST(Int4Packing, InterleavedNibbleOrder) {
  EXPECT_EQ(pack_int4x8({0, 1, 2, 3, 4, 5, 6, 7}), 0x75316420u);
  EXPECT_EQ(pack_int4x8({15, 0, 0, 0, 0, 0, 0, 0}), 0x0000000fu);
  EXPECT_EQ(pack_int4x8({0, 15, 0, 0, 0, 0, 0, 0}), 0x000f0000u);
  EXPECT_EQ(pack_int4x8({0, 0, 0, 0, 0, 0, 0, 15}), 0xf0000000u);
  std::mt19937 rng(7);
  for (int i = 0; i < 1000; ++i) {
    std::array<uint8_t, 8> q{};
    for (auto& x : q) x = static_cast<uint8_t>(rng() % 16);
    EXPECT_EQ(unpack_int4x8(pack_int4x8(q)), q);
  }
}

// The reason for the order: (w >> 4i) & 0x000f000f | 0x64006400 is the half2 (1024 + q[2i],
// 1024 + q[2i+1]); subtracting 1024 (exact in fp16) gives the codes as fp16 pairs.
TEST(Int4Packing, MagicNumberDecodeGivesConsecutivePairs) {
  const std::array<uint8_t, 8> q = {3, 14, 0, 15, 9, 1, 7, 8};
  const uint32_t w = pack_int4x8(q);
  for (int i = 0; i < 4; ++i) {
    const uint32_t h2 = ((w >> (4 * i)) & 0x000f000fu) | 0x64006400u;
    EXPECT_EQ(fp16_to_float(static_cast<uint16_t>(h2)) - 1024.0f, q[2 * i]) << i;
    EXPECT_EQ(fp16_to_float(static_cast<uint16_t>(h2 >> 16)) - 1024.0f, q[2 * i + 1]) << i;
  }
}

TEST(Int4KiviRef, KeyChannelCountingTokens) {
  const Int4KiviLayout l = make_layout(64, 128);
  auto k = zeros(64);
  for (int t = 0; t < 64; ++t) k[static_cast<size_t>(t * kD)] = static_cast<float>(t);
  const Block blk(l, k, zeros(64));
  // 63 / 15 = 4.2 -> fp16 4.19921875 (0x4433); zero 0.
  EXPECT_EQ(blk.k_scale(0), 0x4433);
  EXPECT_EQ(blk.k_zero(0), 0x0000);
  const float s = 4.19921875f;
  for (int t = 0; t < 64; ++t) {
    const auto want = static_cast<uint8_t>(std::lround(t / static_cast<double>(s)));  // no ties
    EXPECT_EQ(blk.k_code(t, 0), want) << t;
  }
  EXPECT_EQ(blk.k_code(2, 0), 0);
  EXPECT_EQ(blk.k_code(3, 0), 1);
  EXPECT_EQ(blk.k_code(10, 0), 2);
  EXPECT_EQ(blk.k_code(11, 0), 3);
  EXPECT_EQ(blk.k_code(63, 0), 15);
  EXPECT_EQ(blk.keys()[63 * kD], 15 * s);
  // The other channels are constant 0: scale 0, codes 0, dequantized exactly 0.
  EXPECT_EQ(blk.k_scale(1), 0);
  EXPECT_EQ(blk.keys()[5 * kD + 1], 0.0f);
}

TEST(Int4KiviRef, ConstantChannelDequantizesToItsZeroExactly) {
  const Int4KiviLayout l = make_layout(32, 32);
  auto k = zeros(32);
  for (int t = 0; t < 32; ++t) {
    k[static_cast<size_t>(t * kD + 3)] = 7.25f;  // exact in fp16: 0x4740
    k[static_cast<size_t>(t * kD + 4)] = 0.1f;   // not exact: zero is fp16(0.1)
  }
  const Block blk(l, k, zeros(32));
  const auto dq = blk.keys();
  EXPECT_EQ(blk.k_scale(3), 0);
  EXPECT_EQ(blk.k_zero(3), 0x4740);
  EXPECT_EQ(blk.k_scale(4), 0);
  EXPECT_EQ(blk.k_zero(4), float_to_fp16(0.1f));
  for (int t = 0; t < 32; ++t) {
    EXPECT_EQ(blk.k_code(t, 3), 0);
    EXPECT_EQ(dq[static_cast<size_t>(t * kD + 3)], 7.25f);
    EXPECT_EQ(dq[static_cast<size_t>(t * kD + 4)], fp16_to_float(float_to_fp16(0.1f)));
  }
}

TEST(Int4KiviRef, TiesRoundHalfToEven) {
  const Int4KiviLayout l = make_layout(32, 32);
  auto k = zeros(32);
  const float ties[] = {0.0f, 15.0f, 0.5f, 1.5f, 2.5f, 3.5f, 13.5f, 14.5f};
  const uint8_t want[] = {0, 15, 0, 2, 2, 4, 14, 14};
  for (int t = 0; t < 32; ++t) k[static_cast<size_t>(t * kD)] = ties[t % 8];
  const Block blk(l, k, zeros(32));
  EXPECT_EQ(blk.k_scale(0), 0x3c00);  // 1.0
  for (int t = 0; t < 32; ++t) EXPECT_EQ(blk.k_code(t, 0), want[t % 8]) << t;
}

// (max - min) / 15 below 2^-25 rounds to an fp16 zero although max != min: all codes 0.
TEST(Int4KiviRef, ScaleUnderflowingFp16GivesZeroCodes) {
  const Int4Params p = int4_params_ref(0.0f, 6 * 0x1p-24f);  // scale 0.4 * 2^-24
  EXPECT_EQ(p.scale, 0);
  EXPECT_EQ(int4_code_ref(6 * 0x1p-24f, p), 0);
  EXPECT_EQ(int4_dequant_ref(0, p), 0.0f);
}

// A subnormal fp16 scale rounds down by 29 %: max lands at 21 steps and is clamped to 15.
TEST(Int4KiviRef, SubnormalScaleClampsAtFifteen) {
  const Int4Params p = int4_params_ref(0.0f, 21 * 0x1p-24f);  // 1.4 * 2^-24 -> 2^-24
  EXPECT_EQ(p.scale, 0x0001);
  EXPECT_EQ(int4_code_ref(21 * 0x1p-24f, p), 15);
  EXPECT_EQ(int4_code_ref(7 * 0x1p-24f, p), 7);
}

// Zero rounded up past min (fp16 ulp 0.5 at 600, scale 0.01): min maps 20 steps below 0.
TEST(Int4KiviRef, ZeroRoundedAboveMinClampsAtZero) {
  const Int4Params p = int4_params_ref(600.3f, 600.45f);
  EXPECT_EQ(fp16_to_float(p.zero), 600.5f);
  EXPECT_EQ(int4_code_ref(600.3f, p), 0);
  EXPECT_EQ(int4_code_ref(600.45f, p), 0);  // still below zero: the channel collapses to 600.5
  EXPECT_EQ(int4_code_ref(600.6f, p), 10);
}

TEST(Int4KiviRef, SignedZerosAreCanonical) {
  const Int4Params a = int4_params_ref(-0.0f, -0.0f);
  const Int4Params b = int4_params_ref(-0.0f, 0.0f);
  const Int4Params c = int4_params_ref(0.0f, -0.0f);  // what a reduction could return
  for (const Int4Params& p : {a, b, c}) {
    EXPECT_EQ(p.scale, 0);
    EXPECT_EQ(p.zero, 0);
  }
}

TEST(Int4KiviRef, NonFiniteInputsGiveCodeZero) {
  const Int4Params p = int4_params_ref(0.0f, 15.0f);
  EXPECT_EQ(int4_code_ref(std::nanf(""), p), 0);
  EXPECT_EQ(int4_code_ref(INFINITY, p), 15);
  EXPECT_EQ(int4_code_ref(-INFINITY, p), 0);
}

TEST(Int4KiviRef, ValueGroupsPerToken) {
  const Int4KiviLayout l = make_layout(32, 32);
  auto v = zeros(32);
  for (int c = 0; c < kD; ++c) v[static_cast<size_t>(c)] = static_cast<float>(c % 32);
  v[static_cast<size_t>(kD + 40)] = -2.0f;  // token 1, group 1: [-2, 0]
  const Block blk(l, zeros(32), v);
  for (int g = 0; g < 4; ++g) {
    EXPECT_EQ(blk.v_scale(0, g), 0x4022) << g;  // 31 / 15 -> 2.06640625
    EXPECT_EQ(blk.v_zero(0, g), 0);
    EXPECT_EQ(blk.v_code(0, g * 32 + 31), 15);
    EXPECT_EQ(blk.v_code(0, g * 32 + 1), 0);  // 0.48 steps
    EXPECT_EQ(blk.v_code(0, g * 32 + 2), 1);
  }
  EXPECT_EQ(blk.v_scale(1, 1), float_to_fp16(2.0f / 15));
  EXPECT_EQ(blk.v_zero(1, 1), float_to_fp16(-2.0f));
  EXPECT_EQ(blk.v_code(1, 40), 0);
  EXPECT_EQ(blk.v_code(1, 41), 15);  // 2 / 0.1333 = 15.004: scale rounded down, rint gives 15
  EXPECT_EQ(blk.v_scale(1, 0), 0);
  EXPECT_EQ(blk.values()[kD + 41], 15 * fp16_to_float(float_to_fp16(2.0f / 15)) - 2.0f);
}

std::vector<float> random_tensor(std::mt19937& rng, int b, bool per_channel) {
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> spread(kD), offset(kD);
  for (int c = 0; c < kD; ++c) {
    spread[static_cast<size_t>(c)] = std::exp(n(rng));
    offset[static_cast<size_t>(c)] = per_channel ? 4.0f * n(rng) : 0.0f;
  }
  std::vector<float> x(static_cast<size_t>(b * kD));
  for (int t = 0; t < b; ++t) {
    for (int c = 0; c < kD; ++c) {
      x[static_cast<size_t>(t * kD + c)] = n(rng) * spread[static_cast<size_t>(c)] + offset[c];
    }
  }
  return x;
}

// |x - dq| <= the larger of scale/2 (rounding), zero - min (x clamped at 0 after zero rounded
// up) and max - (15 * scale + zero) (x clamped at 15), plus fp32 rounding of the arithmetic.
float error_bound(const std::vector<float>& group, Int4Params p) {
  const float mn = *std::min_element(group.begin(), group.end());
  const float mx = *std::max_element(group.begin(), group.end());
  const float s = fp16_to_float(p.scale);
  const float z = fp16_to_float(p.zero);
  const float clamp_lo = z - mn;
  const float clamp_hi = mx - (15 * s + z);
  const float slack = 4e-7f * (std::fabs(z) + 15 * s + std::fabs(mx) + std::fabs(mn));
  return std::max({s / 2, clamp_lo, clamp_hi}) + slack;
}

TEST(Int4KiviRef, RoundTripWithinBoundsForEveryLayout) {
  std::mt19937 rng(1234);
  for (int b : kAllowedBlockSizes) {
    for (int gv : kAllowedValueGroupSizes) {
      SCOPED_TRACE("B=" + std::to_string(b) + " Gv=" + std::to_string(gv));
      const Int4KiviLayout l = make_layout(b, gv);
      const auto k = random_tensor(rng, b, true);
      const auto v = random_tensor(rng, b, false);
      const Block blk(l, k, v);
      const auto dk = blk.keys();
      const auto dv = blk.values();
      for (int c = 0; c < kD; ++c) {
        std::vector<float> ch;
        for (int t = 0; t < b; ++t) ch.push_back(k[static_cast<size_t>(t * kD + c)]);
        const float bound = error_bound(ch, {blk.k_scale(c), blk.k_zero(c)});
        for (int t = 0; t < b; ++t) {
          ASSERT_LE(std::fabs(ch[t] - dk[static_cast<size_t>(t * kD + c)]), bound) << t << c;
        }
      }
      for (int t = 0; t < b; ++t) {
        for (int g = 0; g < kD / gv; ++g) {
          const auto first = v.begin() + t * kD + g * gv;
          const std::vector<float> grp(first, first + gv);
          const float bound = error_bound(grp, {blk.v_scale(t, g), blk.v_zero(t, g)});
          for (int i = 0; i < gv; ++i) {
            ASSERT_LE(std::fabs(grp[i] - dv[static_cast<size_t>(t * kD + g * gv + i)]), bound);
          }
        }
      }
    }
  }
}

// Block dequantization (which widens each group's scale and zero once) gives, bit for bit, the
// element rule int4_dequant_ref on every element: on quantized random tensors, and on blocks of
// random bytes (any fp16 scale and zero: subnormals, infinities, NaNs).
TEST(Int4KiviDequant, BlockEqualsElementRuleBitForBit) {
  std::mt19937 rng(4321);
  for (int b : kAllowedBlockSizes) {
    for (int gv : kAllowedValueGroupSizes) {
      SCOPED_TRACE("B=" + std::to_string(b) + " Gv=" + std::to_string(gv));
      const Int4KiviLayout l = make_layout(b, gv);
      for (int trial = 0; trial < 4; ++trial) {
        Block blk(l, random_tensor(rng, b, true), random_tensor(rng, b, false));
        if (trial >= 2) {
          for (std::byte& x : blk.bytes) x = static_cast<std::byte>(rng() & 0xffu);
        }
        const auto n = static_cast<size_t>(b * kD);
        std::vector<float> ref_k(n), ref_v(n);
        for (int t = 0; t < b; ++t) {
          for (int c = 0; c < kD; ++c) {
            const auto i = static_cast<size_t>(t * kD + c);
            ref_k[i] = int4_dequant_ref(blk.k_code(t, c), {blk.k_scale(c), blk.k_zero(c)});
            ref_v[i] =
                int4_dequant_ref(blk.v_code(t, c), {blk.v_scale(t, c / gv), blk.v_zero(t, c / gv)});
          }
        }
        const auto k = blk.keys();
        const auto v = blk.values();
        ASSERT_EQ(std::memcmp(k.data(), ref_k.data(), n * sizeof(float)), 0) << trial;
        ASSERT_EQ(std::memcmp(v.data(), ref_v.data(), n * sizeof(float)), 0) << trial;
      }
    }
  }
}

// Same input, same bytes, whatever the buffer held before: every byte is written.
TEST(Int4KiviRef, DeterministicAndWritesEveryByte) {
  std::mt19937 rng(99);
  const Int4KiviLayout l = make_layout(64, 64);
  const auto k = random_tensor(rng, 64, true);
  const auto v = random_tensor(rng, 64, false);
  std::vector<std::byte> a(l.block_bytes, std::byte{0x00});
  std::vector<std::byte> b(l.block_bytes, std::byte{0xff});
  quantize_block_ref(l, k, v, a);
  quantize_block_ref(l, k, v, b);
  EXPECT_EQ(a, b);
  std::vector<std::byte> c(l.block_bytes, std::byte{0x5a});
  quantize_keys_block_ref(l, k, c);
  for (size_t i = l.v_codes_offset; i < l.block_bytes; ++i) ASSERT_EQ(c[i], std::byte{0x5a});
  quantize_values_block_ref(l, v, c);
  EXPECT_EQ(a, c);
}

TEST(Int4KiviRefDeathTest, SizeMismatchIsABug) {
  const Int4KiviLayout l = make_layout(32, 128);
  std::vector<float> k(static_cast<size_t>(32 * kD));
  std::vector<std::byte> small(l.block_bytes - 1);
  EXPECT_DEATH(quantize_keys_block_ref(l, k, small), "block of");
  std::vector<std::byte> block(l.block_bytes);
  k.pop_back();
  EXPECT_DEATH(quantize_values_block_ref(l, k, block), "floats");
}

// ---- the Hadamard transform of the value-rotation candidate (kv/hadamard.h) ----

// FNV-1a 64 over the fp32 bits, little-endian.
uint64_t fnv(const std::vector<float>& x) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (float f : x) {
    uint32_t w;
    std::memcpy(&w, &f, 4);
    for (int k = 0; k < 4; ++k) h = (h ^ ((w >> (8 * k)) & 0xffu)) * 0x100000001b3ull;
  }
  return h;
}

// The fp32 result is pinned by numpy (float32 arrays, the same stage order, then the product
// with float32(1/sqrt(128))): a different butterfly order or a fused multiply-add changes bits.
TEST(Hadamard, Fp32OrderPinnedByNumpy) {
  std::vector<float> x(128);
  for (int i = 0; i < 128; ++i) x[i] = static_cast<float>((i * 37 % 101) - 50) / 7.0f;
  hadamard_ref(x);
  EXPECT_EQ(x[0], -0.9975257f);
  EXPECT_EQ(fnv(x), 0x3023104460a7bb1dull);
  EXPECT_EQ(kHadamardScale128, static_cast<float>(1.0 / std::sqrt(128.0)));
}

TEST(Hadamard, OrthonormalSelfInverseAndSpreadsAnOutlier) {
  std::vector<float> e(128, 0.0f);
  e[9] = 1.0f;
  hadamard_ref(e);  // a column of H / sqrt(128): every entry +-1/sqrt(128), exactly
  for (int i = 0; i < 128; ++i) {
    EXPECT_EQ(std::fabs(e[i]), kHadamardScale128) << i;
    EXPECT_EQ(e[i] > 0, (std::popcount(static_cast<unsigned>(i & 9)) % 2) == 0) << i;
  }
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(128);
  for (auto& v : x) v = dist(rng);
  x[5] = 60.0f;  // an outlier channel
  std::vector<float> y = x;
  hadamard_ref(y);
  EXPECT_LT(*std::max_element(y.begin(), y.end()), 10.0f);  // 60 / sqrt(128) = 5.3 plus noise
  hadamard_ref(y);
  for (int i = 0; i < 128; ++i) EXPECT_NEAR(y[i], x[i], 2e-5f * 60) << i;
  std::vector<float> bad(96);
  EXPECT_DEATH(hadamard_ref(bad), "power of two");
}

}  // namespace
}  // namespace s4kv::kv
