// The Backend interface's contract (backend.h): start-up order on the CPU backend, and
// submit/wait with up to two steps in flight, outputs in submit order and each valid until the
// next wait(), whatever the backend does with its own buffer.
#include <gtest/gtest.h>

#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/forward_batch_builder.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace s4kv::backend {
namespace {

// Writes the batch's first token id into the one buffer it reuses for every step.
class OneBufferBackend final : public SynchronousBackend {
 public:
  std::string_view name() const override { return "one-buffer"; }
  int64_t vocab_size() const override { return 3; }
  Status init_kv_cache(const KvCacheConfig& kv) override {
    kv_ = kv;
    return Status::ok();
  }
  const KvCacheConfig& kv_cache_config() const override { return kv_; }

 protected:
  std::span<const float> run(const ForwardBatch& batch) override {
    buffer_.assign(3, static_cast<float>(batch.token_ids[0]));
    return buffer_;
  }

 private:
  KvCacheConfig kv_;
  std::vector<float> buffer_;
};

ForwardBatchBuilder batch_of(int32_t token, std::vector<int32_t>& tokens) {
  ForwardBatchBuilder b(16, 1);
  tokens = {token};
  const std::vector<int32_t> table = {0};
  b.add(tokens, 0, table);
  b.want_logits(0);
  return b;
}

TEST(SynchronousBackend, TwoInFlightComeBackInSubmitOrderAndStayValid) {
  OneBufferBackend backend;
  ASSERT_TRUE(backend.init_kv_cache({1, 16}).is_ok());
  std::vector<int32_t> t1, t2, t3, t4;
  const auto b1 = batch_of(1, t1), b2 = batch_of(2, t2), b3 = batch_of(3, t3), b4 = batch_of(4, t4);
  backend.submit(b1.batch());
  backend.submit(b2.batch());
  const auto out1 = backend.wait();
  backend.submit(b3.batch());  // must not disturb out1 before the next wait()
  EXPECT_EQ(out1[0], 1.0f);
  const auto out2 = backend.wait();
  EXPECT_EQ(out2[0], 2.0f);
  backend.submit(b4.batch());
  EXPECT_EQ(out2[0], 2.0f);
  EXPECT_EQ(backend.wait()[0], 3.0f);
  EXPECT_EQ(backend.wait()[0], 4.0f);
  EXPECT_EQ(backend.forward(b1.batch())[0], 1.0f);
}

TEST(SynchronousBackendDeathTest, ThreeInFlightOrAWaitWithoutASubmitIsABug) {
  OneBufferBackend backend;
  ASSERT_TRUE(backend.init_kv_cache({1, 16}).is_ok());
  std::vector<int32_t> t;
  const auto b = batch_of(1, t);
  EXPECT_DEATH(backend.wait(), "without a submitted step");
  backend.submit(b.batch());
  backend.submit(b.batch());
  EXPECT_DEATH(backend.submit(b.batch()), "more than 2 steps");
}

TEST(CpuBackendStartUp, UnsupportedThenProfileThenInitOnce) {
  auto config = model::load_model_config("models/s4kv-tiny");
  ASSERT_TRUE(config.is_ok());
  auto weights = model::load_weights("models/s4kv-tiny", *config, model::LoadFormat::kAuto);
  ASSERT_TRUE(weights.is_ok());
  auto backend = cpu::make_cpu_backend(*config, *weights);
  KvCacheConfig bad;
  bad.block_size = 64;
  bad.dtype = kv::KvCacheDtype::kInt4Kivi;
  bad.num_residual_slots = 4;
  bad.value_group_size = 48;
  const auto reasons = backend->unsupported(bad);
  ASSERT_EQ(reasons.size(), 1u);
  EXPECT_NE(reasons[0].find("48"), std::string::npos) << reasons[0];
  auto profile = backend->profile();
  ASSERT_TRUE(profile.is_ok());
  EXPECT_LT(profile->kv_cache_bytes, 0) << "the CPU has no budget of its own";
  KvCacheConfig good = bad;
  good.value_group_size = 128;
  good.num_blocks = 8;
  EXPECT_TRUE(backend->unsupported(good).empty());
  ASSERT_TRUE(backend->init_kv_cache(good).is_ok());
  EXPECT_EQ(backend->kv_cache_config().num_blocks, 8);
  EXPECT_FALSE(backend->init_kv_cache(good).is_ok()) << "a second init_kv_cache";
}

}  // namespace
}  // namespace s4kv::backend
