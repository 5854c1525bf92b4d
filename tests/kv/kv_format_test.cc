// KV format arithmetic: bytes per token of the five promised models (16-bit and int4_kivi)
// and the block size / value group size validation.
#include "kv/kv_format.h"

#include <gtest/gtest.h>

#include <string>

#include "common/json.h"

namespace s4kv::kv {
namespace {

struct ModelCase {
  const char* config;  // tests/fixtures/configs/<config>.json
  double bytes_16bit;  // 2 * 2 * 128 * layers * kv heads
};

class FixtureBytes : public ::testing::TestWithParam<ModelCase> {};

// Layer and head counts come from the fixture files so the table below is checked against them.
TEST_P(FixtureBytes, SixteenBitAndInt4Kivi) {
  const ModelCase& c = GetParam();
  auto doc = read_json_file(std::string("tests/fixtures/configs/") + c.config + ".json");
  ASSERT_TRUE(doc.is_ok()) << doc.status().message();
  const int64_t layers = (*doc)["num_hidden_layers"].get<int64_t>();
  const int64_t kv_heads = (*doc)["num_key_value_heads"].get<int64_t>();
  EXPECT_EQ(kv_bytes_per_token(KvCacheDtype::k16Bit, layers, kv_heads, 128), c.bytes_16bit);
  const double int4 = kv_bytes_per_token(KvCacheDtype::kInt4Kivi, layers, kv_heads, 128, 64, 128);
  EXPECT_EQ(int4, 140.0 * static_cast<double>(layers * kv_heads));
  EXPECT_NEAR(c.bytes_16bit / int4, 3.657, 0.001);
  EXPECT_EQ(kv_bytes_per_token(KvCacheDtype::kFp8E4M3, layers, kv_heads, 128), c.bytes_16bit / 2);
}

INSTANTIATE_TEST_SUITE_P(FiveModels, FixtureBytes,
                         ::testing::Values(ModelCase{"qwen2.5-1.5b-instruct", 28672},
                                           ModelCase{"qwen2.5-3b-instruct", 36864},
                                           ModelCase{"qwen2.5-7b-instruct", 57344},
                                           ModelCase{"llama-3.2-3b-instruct", 114688},
                                           ModelCase{"llama-3.1-8b-instruct", 131072}));

TEST(KvBytesPerToken, PerLayerPerHead) {
  EXPECT_EQ(kv_bytes_per_token(KvCacheDtype::k16Bit, 1, 1, 128), 512.0);
  // D/2 + 4D/B + D/2 + 4D/Gv with D = 128.
  EXPECT_EQ(kv_bytes_per_token(KvCacheDtype::kInt4Kivi, 1, 1, 128, 64, 128), 140.0);
  EXPECT_EQ(kv_bytes_per_token(KvCacheDtype::kInt4Kivi, 1, 1, 128, 32, 128), 148.0);
  EXPECT_EQ(kv_bytes_per_token(KvCacheDtype::kInt4Kivi, 1, 1, 128, 128, 128), 136.0);
  EXPECT_EQ(kv_bytes_per_token(KvCacheDtype::kInt4Kivi, 1, 1, 128, 64, 32), 152.0);
  EXPECT_EQ(kv_bytes_per_token(KvCacheDtype::kFp8E4M3, 1, 1, 128), 256.0);
  // Defaults are B = 64, Gv = 128.
  EXPECT_EQ(kv_bytes_per_token(KvCacheDtype::kInt4Kivi, 2, 3, 128), 140.0 * 6);
}

// Worst layout B=32, Gv=32 costs 160 bytes (3.2x); the 4-bit limit is 4x.
TEST(KvBytesPerToken, Int4RatioWithinPhysicalBoundsForEveryLayout) {
  for (int b : kAllowedBlockSizes) {
    for (int gv : kAllowedValueGroupSizes) {
      const double ratio = kv_bytes_per_token(KvCacheDtype::k16Bit, 1, 1, 128) /
                           kv_bytes_per_token(KvCacheDtype::kInt4Kivi, 1, 1, 128, b, gv);
      EXPECT_GE(ratio, 3.2) << "B=" << b << " Gv=" << gv;
      EXPECT_LT(ratio, 4.0) << "B=" << b << " Gv=" << gv;
    }
  }
}

TEST(KvLayout, AllowedValues) {
  EXPECT_EQ(kDefaultBlockSize, 64);
  EXPECT_EQ(kDefaultValueGroupSize, 128);
  for (int v : {32, 64, 128}) {
    EXPECT_TRUE(validate_block_size(v).is_ok()) << v;
    EXPECT_TRUE(validate_value_group_size(v).is_ok()) << v;
  }
  EXPECT_TRUE(validate_kv_layout(64, 128).is_ok());
}

TEST(KvLayout, RefusedValuesNameTheValue) {
  for (int v : {0, -64, 16, 48, 96, 256, 1 << 30}) {
    Status s = validate_block_size(v);
    EXPECT_EQ(s.code(), StatusCode::kUnsupported);
    EXPECT_EQ(s.message(),
              "unsupported block_size=" + std::to_string(v) + " (supported: 32, 64, 128)");
  }
  EXPECT_EQ(validate_value_group_size(16).message(),
            "unsupported value_group_size=16 (supported: 32, 64, 128)");
  EXPECT_EQ(validate_kv_layout(48, 16).message(),
            "unsupported block_size=48 (supported: 32, 64, 128)");
  EXPECT_EQ(validate_kv_layout(64, 16).message(),
            "unsupported value_group_size=16 (supported: 32, 64, 128)");
}

// Whole sequences: full blocks (sink and window blocks at 16-bit) plus the 16-bit residual;
// density at 8k.
TEST(KvBytesAtContext, BlocksSinksWindowAndResidual) {
  const Int4KiviVariant v1{0, 0, false};
  EXPECT_EQ(kv_bytes_at_context(KvCacheDtype::k16Bit, 8192, 1, 1, 128), 512.0 * 8192);
  EXPECT_EQ(kv_bytes_at_context(KvCacheDtype::kFp8E4M3, 100, 2, 3, 128), 256.0 * 100 * 6);
  EXPECT_EQ(kv_bytes_at_context(KvCacheDtype::kInt4Kivi, 8192, 1, 1, 128, 64, 128, v1),
            140.0 * 8192);
  // 100 tokens at B = 64: one int4 block and 36 residual tokens.
  EXPECT_EQ(kv_bytes_at_context(KvCacheDtype::kInt4Kivi, 100, 1, 1, 128, 64, 128, v1),
            140.0 * 64 + 512 * 36);
  // A sink block: the first block 16-bit.
  const Int4KiviVariant sink{1, 0, false};
  EXPECT_EQ(kv_bytes_at_context(KvCacheDtype::kInt4Kivi, 100, 1, 1, 128, 64, 128, sink),
            512.0 * 100);
  const double sink8k =
      kv_bytes_at_context(KvCacheDtype::kInt4Kivi, 8192, 1, 1, 128, 64, 128, sink);
  EXPECT_EQ(sink8k, 140.0 * 127 * 64 + 512 * 64);
  EXPECT_NEAR(512.0 * 8192 / sink8k, 3.583, 0.001);
  // v2, the default: the last full block 16-bit too (a window block; not when it is the sink).
  const double at8k = kv_bytes_at_context(KvCacheDtype::kInt4Kivi, 8192, 1, 1, 128);
  EXPECT_EQ(at8k, 140.0 * 126 * 64 + 512 * 128);
  EXPECT_NEAR(512.0 * 8192 / at8k, 3.511, 0.001);
  EXPECT_EQ(kv_bytes_at_context(KvCacheDtype::kInt4Kivi, 100, 1, 1, 128), 512.0 * 100);
  EXPECT_EQ(kv_bytes_at_context(KvCacheDtype::kInt4Kivi, 150, 1, 1, 128), 512.0 * 150);
  EXPECT_EQ(kv_bytes_at_context(KvCacheDtype::kInt4Kivi, 200, 1, 1, 128),
            140.0 * 64 + 512 * (200 - 64));
  // The Hadamard rotation costs no bytes; B = 32 with a sink: one 32-token 16-bit block.
  EXPECT_EQ(kv_bytes_at_context(KvCacheDtype::kInt4Kivi, 8192, 1, 1, 128, 64, 128, {0, 0, true}),
            140.0 * 8192);
  EXPECT_EQ(kv_bytes_at_context(KvCacheDtype::kInt4Kivi, 8192, 1, 1, 128, 32, 64, {1, 0, true}),
            152.0 * (8192 - 32) + 512 * 32);
}

TEST(Int4KiviVariant, Validation) {
  EXPECT_TRUE(validate_int4_variant({}, 128).is_ok());
  EXPECT_TRUE(Int4KiviVariant{}.is_default());
  EXPECT_TRUE(Int4KiviVariant{}.sink_blocks == 1 && Int4KiviVariant{}.window_blocks == 1 &&
              Int4KiviVariant{}.value_hadamard);  // format v2
  EXPECT_TRUE((Int4KiviVariant{0, 0, false}.is_v1()));
  EXPECT_EQ(kInt4KiviFormatVersion, 2);
  EXPECT_TRUE(validate_int4_variant({kMaxSinkBlocks, kMaxWindowBlocks, true}, 128).is_ok());
  EXPECT_EQ(validate_int4_variant({2, 0, false}, 128).message(),
            "unsupported int4 sink_blocks=2 (supported: 0..1)");
  EXPECT_EQ(validate_int4_variant({1, 2, false}, 128).message(),
            "unsupported int4 window_blocks=2 (supported: 0..1)");
  EXPECT_EQ(validate_int4_variant({0, 0, true}, 96).message(),
            "unsupported head_dim=96 for the value Hadamard rotation (a power of two)");
  EXPECT_TRUE(validate_int4_variant({0, 0, false}, 96).is_ok());
}

TEST(KvCacheDtype, Names) {
  EXPECT_EQ(kv_cache_dtype_name(KvCacheDtype::k16Bit), "16bit");
  EXPECT_EQ(kv_cache_dtype_name(KvCacheDtype::kInt4Kivi), "int4_kivi");
  EXPECT_EQ(kv_cache_dtype_name(KvCacheDtype::kFp8E4M3), "fp8_e4m3");
}

TEST(KvBytesPerTokenDeathTest, InvalidLayoutIsABug) {
  EXPECT_DEATH((void)kv_bytes_per_token(KvCacheDtype::kInt4Kivi, 1, 1, 128, 48, 128),
               "block_size=48");
  EXPECT_DEATH((void)kv_bytes_per_token(KvCacheDtype::k16Bit, 0, 1, 128), "num_layers=0");
}

}  // namespace
}  // namespace s4kv::kv
