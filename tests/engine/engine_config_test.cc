// --max-num-batched-tokens' default per device and use (vLLM's), and its resolution.
#include <gtest/gtest.h>

#include "engine/engine_config.h"

namespace s4kv::engine {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

TEST(EngineConfigDefaults, MaxNumBatchedTokensFollowsDeviceAndUse) {
  EXPECT_EQ(default_max_num_batched_tokens("cpu", false, 0, ""), 2048);
  EXPECT_EQ(default_max_num_batched_tokens("cpu", true, 0, ""), 2048);
  // A GPU of >= 70 GiB: 8192 for a server, 16384 offline.
  EXPECT_EQ(default_max_num_batched_tokens("cuda", false, 139 * kGiB, "NVIDIA H200"), 8192);
  EXPECT_EQ(default_max_num_batched_tokens("cuda", true, 139 * kGiB, "NVIDIA H200"), 16384);
  EXPECT_EQ(default_max_num_batched_tokens("cuda", false, 70 * kGiB, "NVIDIA H100"), 8192);
  // Smaller GPUs, and an A100 of any size: 2048 and 8192.
  EXPECT_EQ(default_max_num_batched_tokens("cuda", false, 70 * kGiB - 1, "NVIDIA H100"), 2048);
  EXPECT_EQ(default_max_num_batched_tokens("cuda", false, 22 * kGiB, "NVIDIA A10G"), 2048);
  EXPECT_EQ(default_max_num_batched_tokens("cuda", true, 22 * kGiB, "NVIDIA A10G"), 8192);
  EXPECT_EQ(default_max_num_batched_tokens("cuda", false, 79 * kGiB, "NVIDIA A100-SXM4-80GB"),
            2048);
  EXPECT_EQ(default_max_num_batched_tokens("cuda", true, 79 * kGiB, "NVIDIA A100-SXM4-80GB"), 8192);
}

// What resolve_engine_config reads of a model: KV bytes per token and its positions.
model::ModelConfig small_model() {
  model::ModelConfig c;
  c.num_hidden_layers = 2;
  c.num_key_value_heads = 1;
  c.head_dim = 128;
  c.max_position_embeddings = 4096;
  return c;
}

TEST(EngineConfigDefaults, UnsetBudgetResolvesTo2048AndANegativeOneIsRefused) {
  EngineConfig c;
  ASSERT_EQ(c.max_num_batched_tokens, 0);
  auto r = resolve_engine_config(c, small_model());
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->scheduler.max_num_batched_tokens, 2048);
  EXPECT_EQ(r->runner.max_num_batched_tokens, 2048);
  c.max_num_batched_tokens = 16384;
  r = resolve_engine_config(c, small_model());
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->scheduler.max_num_batched_tokens, 16384);
  c.max_num_batched_tokens = -1;
  r = resolve_engine_config(c, small_model());
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("--max-num-batched-tokens"), std::string::npos);
}

}  // namespace
}  // namespace s4kv::engine
