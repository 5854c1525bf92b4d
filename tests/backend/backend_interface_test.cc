// The Backend interface's contract (backend.h): start-up order on the CPU backend, and
// submit/wait with up to two steps in flight, outputs in submit order and each valid until the
// next wait(), whatever the backend does with its own buffer.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/attention.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_kv_cache.h"
#include "backend/cpu/rope.h"
#include "backend/forward_batch_builder.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace s4kv::backend {
namespace {

// Writes the batch's first token id into the one buffer it reuses for every step (and logit 1
// at that id modulo 3, so a greedy row samples it).
class OneBufferBackend final : public HostSamplingBackend {
 public:
  OneBufferBackend() : HostSamplingBackend(3) {}
  std::string_view name() const override { return "one-buffer"; }
  int64_t vocab_size() const override { return 3; }
  Status init_kv_cache(const KvCacheConfig& kv) override {
    kv_ = kv;
    return Status::ok();
  }
  const KvCacheConfig& kv_cache_config() const override { return kv_; }

 protected:
  std::span<const float> run_logits(const ForwardBatch& batch) override {
    buffer_.assign(3, static_cast<float>(-batch.token_ids[0]));
    buffer_[static_cast<size_t>(batch.token_ids[0] % 3)] = 1.0f;
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
  EXPECT_EQ(out1.logits[2], -1.0f);
  EXPECT_TRUE(out1.samples.empty());
  const auto out2 = backend.wait();
  EXPECT_EQ(out2.logits[0], -2.0f);
  backend.submit(b4.batch());
  EXPECT_EQ(out2.logits[0], -2.0f);
  EXPECT_EQ(backend.wait().logits[1], -3.0f);
  EXPECT_EQ(backend.wait().logits[0], -4.0f);
  EXPECT_EQ(backend.forward(b1.batch()).logits[0], -1.0f);
}

// Sampled steps in flight: the samples (and the logits asked for) of the older step survive
// the next submit, and a step that samples returns no logits unless asked.
TEST(SynchronousBackend, SamplesOfTwoInFlightStepsStayValid) {
  OneBufferBackend backend;
  ASSERT_TRUE(backend.init_kv_cache({1, 16}).is_ok());
  std::vector<int32_t> t1, t2, t3;
  const auto b1 = batch_of(1, t1), b2 = batch_of(2, t2), b3 = batch_of(3, t3);
  const SamplingRow greedy;
  SamplingRow with_logprobs;
  with_logprobs.num_logprobs = 1;
  ForwardBatch s1 = b1.batch(), s2 = b2.batch(), s3 = b3.batch();
  s1.sampling = {&greedy, 1};
  s2.sampling = {&with_logprobs, 1};
  s2.return_logits = true;
  s3.sampling = {&greedy, 1};
  backend.submit(s1);
  backend.submit(s2);
  const auto out1 = backend.wait();
  backend.submit(s3);
  ASSERT_EQ(out1.samples.size(), 1u);
  EXPECT_EQ(out1.samples[0].token_id, 1);
  EXPECT_TRUE(out1.logits.empty());
  const auto out2 = backend.wait();
  ASSERT_EQ(out2.samples.size(), 1u);
  EXPECT_EQ(out2.samples[0].token_id, 2);
  EXPECT_EQ(out2.samples[0].rank, 1);
  ASSERT_EQ(out2.samples[0].top_logprobs.size(), 1u);
  EXPECT_EQ(out2.samples[0].top_logprobs[0].token_id, 2);
  ASSERT_EQ(out2.logits.size(), 3u);
  EXPECT_EQ(out2.logits[2], 1.0f);
  EXPECT_EQ(backend.wait().samples[0].token_id, 0);
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
  bad.num_seats = 4;
  bad.value_group_size = 48;
  const auto reasons = backend->unsupported(bad);
  ASSERT_EQ(reasons.size(), 1u);
  EXPECT_NE(reasons[0].find("48"), std::string::npos) << reasons[0];
  auto profile = backend->profile();
  ASSERT_TRUE(profile.is_ok());
  EXPECT_FALSE(profile->kv_cache_bytes.has_value()) << "the CPU has no budget of its own";
  KvCacheConfig good = bad;
  good.value_group_size = 128;
  good.num_blocks = 8;
  EXPECT_TRUE(backend->unsupported(good).empty());
  ASSERT_TRUE(backend->init_kv_cache(good).is_ok());
  EXPECT_EQ(backend->kv_cache_config().num_blocks, 8);
  EXPECT_FALSE(backend->init_kv_cache(good).is_ok()) << "a second init_kv_cache";
}

// Sink runs (KvCacheConfig::sink_base_block): int4_kivi with sink blocks only, each run holding
// a 16-bit block, all of them (the dummy block's too) below the seats' rings.
TEST(KvCacheShape, SinkRunsHoldABlockAndStayBelowTheRings) {
  KvCacheConfig kv;
  kv.block_size = 64;
  kv.dtype = kv::KvCacheDtype::kInt4Kivi;
  kv.num_seats = 4;
  kv.num_sink_blocks = 4;
  kv.num_window_blocks = 1;
  kv.int4_value_hadamard = true;
  auto layout = kv::Int4KiviLayout::create(64, 128, 128);
  ASSERT_TRUE(layout.is_ok());
  const int64_t run = layout->ring_blocks(1), ring = layout->ring_blocks(2);
  kv.sink_run_blocks = run;
  kv.sink_base_block = 100;
  kv.ring_base_block = 100 + 5 * run;
  kv.num_blocks = kv.ring_base_block + 4 * ring;
  EXPECT_TRUE(check_kv_cache_shape(kv, 128).is_ok()) << check_kv_cache_shape(kv, 128).message();
  kv.sink_base_block = 101;  // the dummy block's run would overlap the first ring
  EXPECT_NE(check_kv_cache_shape(kv, 128).message().find("past the seats' rings"),
            std::string::npos);
  kv.sink_base_block = 100;
  kv.sink_run_blocks = run - 1;
  EXPECT_NE(check_kv_cache_shape(kv, 128).message().find("a 16-bit block needs"),
            std::string::npos);
  kv.sink_run_blocks = run;
  kv.num_sink_blocks = 0;
  EXPECT_NE(check_kv_cache_shape(kv, 128).message().find("without sink blocks"), std::string::npos);
  kv.num_sink_blocks = 4;
  kv.dtype = kv::KvCacheDtype::k16Bit;
  EXPECT_FALSE(check_kv_cache_shape(kv, 128).is_ok());
}

// A padding sequence (dummy seat, dummy block: backend.h) beside a real one changes nothing the
// real one computes, for every dtype, through fills and commits of the dummy block.
class Padding : public ::testing::TestWithParam<kv::KvCacheDtype> {};

TEST_P(Padding, DummySeatAndBlockChangeNothingForRealRows) {
  constexpr int64_t kD = 128, kKv = 2, kHeads = 4, kB = 32, kLen = 150;
  KvCacheConfig kv;
  kv.num_blocks = 8;
  kv.block_size = kB;
  kv.dtype = GetParam();
  kv.num_seats = 2;
  if (kv.dtype == kv::KvCacheDtype::kInt4Kivi) {
    kv.num_sink_blocks = 2;
    kv.num_window_blocks = 1;
    kv.int4_value_hadamard = true;
  }
  const auto inv_freq = cpu::rope_inv_freq(kD, 10000.0, model::RopeScaling{});
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> k(static_cast<size_t>(kLen * kKv * kD)), v(k.size());
  for (auto& x : k) x = dist(rng);
  for (auto& x : v) x = dist(rng);
  std::vector<int32_t> table(kLen / kB + 1);
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);
  if (kv.dtype == kv::KvCacheDtype::kInt4Kivi) table[0] = static_cast<int32_t>(kv.num_blocks);
  const std::vector<int32_t> dummy_table(table.size(), static_cast<int32_t>(kv.dummy_block()));

  std::vector<std::vector<float>> outputs[2];
  for (int padded = 0; padded < 2; ++padded) {
    auto cache = cpu::make_cpu_kv_cache(kv, {1, kKv, kD, DType::kBF16}, inv_freq);
    ASSERT_TRUE(cache.is_ok()) << cache.status().message();
    std::mt19937 qrng(9);
    for (int64_t begin = 0; begin < kLen;) {
      const int64_t q = begin < 100 ? 37 : 1;
      ForwardBatchBuilder b(kB, static_cast<int64_t>(table.size()));
      std::vector<int32_t> tokens(static_cast<size_t>(q), 0);
      b.add(tokens, begin, std::span(table).first(static_cast<size_t>((begin + q + kB - 1) / kB)),
            0, 0);
      std::vector<float> kk(k.begin() + begin * kKv * kD, k.begin() + (begin + q) * kKv * kD);
      std::vector<float> vv(v.begin() + begin * kKv * kD, v.begin() + (begin + q) * kKv * kD);
      if (padded == 1) {  // two padding sequences of one token sharing the dummy seat and block
        const std::vector<int32_t> one = {0};
        for (int pad = 0; pad < 2; ++pad) {
          b.add(one, (begin + pad) % kB, std::span(dummy_table).first(1),
                static_cast<int32_t>(kv.dummy_seat()), 0);
          kk.insert(kk.end(), k.begin(), k.begin() + kKv * kD);
          vv.insert(vv.end(), v.begin(), v.begin() + kKv * kD);
        }
      }
      const ForwardBatch batch = b.batch();
      check_forward_batch(batch, kv, 1);
      (*cache)->begin_step(batch);
      (*cache)->write(0, batch, kk, vv, kKv * kD);
      // The real rows' queries from one stream; the padding row's are zeros.
      std::vector<float> qv(static_cast<size_t>(batch.num_tokens() * kHeads * kD), 0.0f),
          out(qv.size());
      for (int64_t i = 0; i < q * kHeads * kD; ++i) qv[static_cast<size_t>(i)] = dist(qrng);
      const cpu::AttentionArgs a{qv,
                                 kHeads * kD,
                                 kHeads,
                                 kKv,
                                 kD,
                                 1.0f / std::sqrt(float{kD}),
                                 batch.query_start_loc,
                                 batch.seq_lens,
                                 out};
      cpu::context_attention_ref(
          a,
          [&](int64_t s, int64_t g, int64_t b, int64_t e, float* kp, float* vp) {
            return (*cache)->gather_range(0, batch, s, g, b, e, kp, vp);
          },
          nullptr);
      (*cache)->commit(0, batch, nullptr);
      out.resize(static_cast<size_t>(q * kHeads * kD));  // the real sequence's rows
      outputs[padded].push_back(out);
      begin += q;
    }
  }
  ASSERT_EQ(outputs[0].size(), outputs[1].size());
  for (size_t i = 0; i < outputs[0].size(); ++i) {
    EXPECT_EQ(outputs[0][i], outputs[1][i]) << "step " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Padding,
                         ::testing::Values(kv::KvCacheDtype::k16Bit, kv::KvCacheDtype::kFp8E4M3,
                                           kv::KvCacheDtype::kInt4Kivi));

TEST(CheckForwardBatchDeathTest, TheDummyBlockOnlyInPaddingSequences) {
  KvCacheConfig kv;
  kv.num_blocks = 4;
  kv.block_size = 16;
  kv.num_seats = 2;
  ForwardBatchBuilder b(16, 2);
  const std::vector<int32_t> tokens = {0};
  const std::vector<int32_t> mixed = {0, static_cast<int32_t>(kv.dummy_block())};
  std::vector<int32_t> t20(20, 0);
  b.add(t20, 0, mixed, 0, 0);  // a real sequence reaching into the dummy block
  EXPECT_DEATH(check_forward_batch(b.batch(), kv, 1), "block 1 id 4");
  b.clear();
  const std::vector<int32_t> real_in_dummy = {0, 1};
  b.add(t20, 0, real_in_dummy, static_cast<int32_t>(kv.dummy_seat()), 0);  // padding, real blocks
  EXPECT_DEATH(check_forward_batch(b.batch(), kv, 1), "not the dummy block");
}

TEST(CheckDistinctSeatsDeathTest, OnlyTheDummySeatIsShared) {
  std::vector<uint8_t> seen;
  const int64_t dummy = 3;
  const std::vector<int32_t> padded = {0, 3, 2, 3, 3, 1};  // three padding sequences
  check_distinct_seats(padded, dummy, seen);
  const std::vector<int32_t> twice = {0, 3, 2, 0};
  EXPECT_DEATH(check_distinct_seats(twice, dummy, seen), "residual slot 0 given to two");
}

}  // namespace
}  // namespace s4kv::backend
