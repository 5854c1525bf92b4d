// --max-num-batched-tokens' default per device and use (vLLM's), and its resolution.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "common/json.h"
#include "engine/engine_config.h"
#include "model/model_config.h"

namespace s4kv::engine {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

TEST(EngineConfigDefaults, MaxNumSeqsFollowsDevice) {
  EXPECT_EQ(default_max_num_seqs("cpu", 0, ""), 64);
  EXPECT_EQ(default_max_num_seqs("cpu", 139 * kGiB, "NVIDIA H200"), 64);
  // A GPU of >= 70 GiB other than an A100: 1024, as vLLM; else 256.
  EXPECT_EQ(default_max_num_seqs("cuda", 139 * kGiB, "NVIDIA H200"), 1024);
  EXPECT_EQ(default_max_num_seqs("cuda", 70 * kGiB, "NVIDIA H100 80GB HBM3"), 1024);
  EXPECT_EQ(default_max_num_seqs("cuda", 70 * kGiB - 1, "NVIDIA H100"), 256);
  EXPECT_EQ(default_max_num_seqs("cuda", 44 * kGiB, "NVIDIA L40S"), 256);
  EXPECT_EQ(default_max_num_seqs("cuda", 79 * kGiB, "NVIDIA A100-SXM4-80GB"), 256);
}

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

model::ModelConfig fixture(const std::string& name) {
  const std::string path = "tests/fixtures/configs/" + name + ".json";
  auto doc = read_json_file(path);
  S4KV_CHECK(doc.is_ok(), doc.status().message());
  model::ConfigParse p = model::parse_model_config(*doc, path);
  S4KV_CHECK(p.config.has_value(), name);
  return *p.config;
}

// Capacity on Qwen2.5-7B at the KV budget the H200 gives at --gpu-memory-utilization 0.9
// (108.68 GiB, bench/results/cuda_h200/capacity_h200.json) and the defaults: int4_kivi's 16-bit
// residual rings and sink blocks live in pool blocks the running sequences hold (not reserved
// for every seat off the budget), so its KV tokens are the block density's 3.66x of the 16-bit
// cache's less only the dummy seat's ring and the dummy block's sink run.
TEST(EngineConfigCapacity, Int4KiviRingsInThePoolOnQwen7B) {
  const model::ModelConfig m = fixture("qwen2.5-7b-instruct");
  EngineConfig c;
  c.max_num_seqs = 256;
  c.kv_cache_memory_bytes = static_cast<int64_t>(108.68 * static_cast<double>(kGiB));
  int64_t tokens[3] = {};
  const kv::KvCacheDtype dtypes[3] = {kv::KvCacheDtype::k16Bit, kv::KvCacheDtype::kFp8E4M3,
                                      kv::KvCacheDtype::kInt4Kivi};
  for (int d = 0; d < 3; ++d) {
    c.kv_cache_dtype = dtypes[d];
    auto r = resolve_engine_config(c, m);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    tokens[d] = r->capacity.num_tokens;
    if (d == 2) {
      EXPECT_EQ(r->ring_blocks, 8);  // 2 x 2 x 64 x 128 x 2 bytes a head in 8960-byte blocks
      EXPECT_EQ(r->cache.blocks_per_seat, 8);
      EXPECT_EQ(r->kv.ring_base_block, r->kv.num_blocks - 256 * 8);
      // Sink runs: 2 x 64 x 128 x 2 bytes a head in 4 blocks, 256 and the dummy block's below
      // the seats' rings.
      EXPECT_EQ(r->sink_run_blocks, 4);
      EXPECT_EQ(r->cache.sink_run_blocks, 4);
      EXPECT_EQ(r->kv.sink_base_block, r->kv.ring_base_block - 257 * 4);
      const std::string line = describe_capacity(*r);
      EXPECT_NE(line.find("residual ring takes 8 of these blocks"), std::string::npos) << line;
      // 32,768-token requests: 511 pool blocks (the first is a sink block), 8 for the ring and 4
      // for the sink's run.
      char want[96];
      std::snprintf(want, sizeof want, "maximum concurrency for 32768 tokens per request: %.2fx",
                    static_cast<double>(r->capacity.num_blocks) / 523.0);
      EXPECT_NE(line.find(want), std::string::npos) << line << " / " << want;
    } else {
      EXPECT_EQ(r->kv.ring_base_block, -1);
      EXPECT_EQ(r->cache.blocks_per_seat, 0);
    }
  }
  const double vs16 = static_cast<double>(tokens[2]) / static_cast<double>(tokens[0]);
  const double vs8 = static_cast<double>(tokens[2]) / static_cast<double>(tokens[1]);
  std::printf(
      "[ capacity ] Qwen2.5-7B at 108.68 GiB: 16-bit %lld, fp8 %lld, int4_kivi %lld "
      "tokens: %.3fx, %.3fx\n",
      static_cast<long long>(tokens[0]), static_cast<long long>(tokens[1]),
      static_cast<long long>(tokens[2]), vs16, vs8);
  EXPECT_GE(vs16, 3.6);
  EXPECT_GE(vs8, 1.8);
}

// The same on the H100's budget (51.99 GiB at 0.9, bench/results/cuda_h100/): the sink blocks
// no longer come off the budget, so the density holds on the smaller card too (3.588x measured
// with the sinks off the budget).
TEST(EngineConfigCapacity, Int4KiviSinksInThePoolOnAnH100Budget) {
  const model::ModelConfig m = fixture("qwen2.5-7b-instruct");
  EngineConfig c;
  c.max_num_seqs = 256;
  c.kv_cache_memory_bytes = static_cast<int64_t>(51.99 * static_cast<double>(kGiB));
  auto tokens = [&](kv::KvCacheDtype dtype) {
    c.kv_cache_dtype = dtype;
    const auto r = resolve_engine_config(c, m);
    S4KV_CHECK(r.is_ok(), r.status().message());
    return static_cast<double>(r->capacity.num_tokens);
  };
  const double t16 = tokens(kv::KvCacheDtype::k16Bit), t8 = tokens(kv::KvCacheDtype::kFp8E4M3),
               t4 = tokens(kv::KvCacheDtype::kInt4Kivi);
  EXPECT_GE(t4 / t16, 3.6);
  EXPECT_GE(t4 / t8, 1.8);
}

// The rings of --max-num-seqs seats must fit the pool: a budget too small says so.
TEST(EngineConfigCapacity, RingsOfEverySeatMustFit) {
  EngineConfig c;
  c.kv_cache_dtype = kv::KvCacheDtype::kInt4Kivi;
  c.max_num_seqs = 256;
  c.max_model_len = 128;
  c.kv_cache_memory_bytes = 40 << 20;  // 16.8 MB of sink blocks; 1,398 blocks for 2,048
  const auto r = resolve_engine_config(c, small_model());
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("residual rings"), std::string::npos) << r.status().message();
}

// A defaulted --max-num-seqs (vLLM's 1024 on a large GPU) gives way instead: as many seats as
// their rings and sink runs fit in, the dummy block's run too; an explicit one is refused as
// above, and a cache with room for all of them keeps the default.
TEST(EngineConfigCapacity, ADefaultedMaxNumSeqsTakesTheSeatsThatFit) {
  const model::ModelConfig m = fixture("qwen2.5-7b-instruct");
  EngineConfig c;
  c.kv_cache_dtype = kv::KvCacheDtype::kInt4Kivi;
  c.max_num_seqs = 1024;
  c.max_model_len = 4096;
  c.kv_cache_memory_bytes = int64_t{6} << 30;  // 6,411 blocks: 1,024 seats need 12,292
  EXPECT_FALSE(resolve_engine_config(c, m).is_ok());
  c.max_num_seqs_is_default = true;
  const auto r = resolve_engine_config(c, m);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  const int64_t blocks = r->cache.num_blocks, seats = r->scheduler.max_num_seqs;
  EXPECT_LT(seats, 1024);
  EXPECT_LE(seats * 8 + (seats + 1) * 4, blocks);
  EXPECT_GT((seats + 1) * 8 + (seats + 2) * 4, blocks) << "one more seat would fit";
  EXPECT_EQ(r->kv.num_seats, seats);
  EXPECT_EQ(r->cache.num_sink_blocks, seats);
  EXPECT_GE(r->kv.sink_base_block, 0);
  c.kv_cache_memory_bytes = int64_t{52} << 30;
  const auto big = resolve_engine_config(c, m);
  ASSERT_TRUE(big.is_ok()) << big.status().message();
  EXPECT_EQ(big->scheduler.max_num_seqs, 1024);
}

}  // namespace
}  // namespace s4kv::engine
