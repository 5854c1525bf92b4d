// Deferred tokens and two steps in flight (backend.h), as async scheduling drives a backend:
// step k+1 is submitted with its decode tokens deferred (-1 - row) to step k's samples before
// step k is waited for. A second backend of the same kind runs the same steps one at a time with
// the sampled tokens known; every sample (token, logprob, rank, top logprobs) must be
// bit-identical: same batches, same kernels, only the order of host work differs. Greedy and
// seeded rows (their draw counts the output in flight as a placeholder), 16-bit and int4_kivi
// v2 caches. On CUDA the decode steps replay graphs (the deferred ids are resolved on the
// device before the replay), and eagerly with --enforce-eager.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "backend/forward_batch_builder.h"
#include "backend/registry.h"
#include "model/model_config.h"
#include "model/weights.h"
#ifdef S4KV_ASYNC_CUDA
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/device.h"
#endif

namespace s4kv::backend {
namespace {

struct Case {
  const char* name;
  const char* device;
  kv::KvCacheDtype dtype;
  bool enforce_eager = false;
};

constexpr int64_t kSeqs = 5, kBlockSize = 64, kModelLen = 512, kSteps = 40;

KvCacheConfig cache_config(kv::KvCacheDtype dtype) {
  KvCacheConfig kv;
  kv.block_size = kBlockSize;
  kv.dtype = dtype;
  kv.num_blocks = kSeqs * (kModelLen / kBlockSize);
  kv.num_seats = kSeqs;
  if (dtype == kv::KvCacheDtype::kInt4Kivi) {
    kv.num_sink_blocks = kSeqs;
    kv.num_window_blocks = 1;
    kv.int4_value_hadamard = true;
  }
  return kv;
}

struct Seq {
  std::vector<int32_t> prompt, out, table;
};

class AsyncBackend : public ::testing::TestWithParam<Case> {};

TEST_P(AsyncBackend, DeferredTokensEqualKnownTokens) {
  const Case c = GetParam();
#ifdef S4KV_ASYNC_CUDA
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
#endif
  auto config = model::load_model_config("models/s4kv-tiny");
  ASSERT_TRUE(config.is_ok());
  auto weights = model::load_weights("models/s4kv-tiny", *config, model::LoadFormat::kAuto);
  ASSERT_TRUE(weights.is_ok());
  const KvCacheConfig kv = cache_config(c.dtype);
  const BackendLimits limits{512, kSeqs, kModelLen};
  const DeviceOptions options{0.9, 2, c.enforce_eager};
  const DType dtype = std::string(c.device) == "cuda" ? DType::kBF16 : DType::kF32;
  auto pipelined = make_started_backend(c.device, dtype, *config, *weights, kv, limits, options);
  ASSERT_TRUE(pipelined.is_ok()) << pipelined.status().message();
  auto stepwise = make_started_backend(c.device, dtype, *config, *weights, kv, limits, options);
  ASSERT_TRUE(stepwise.is_ok()) << stepwise.status().message();

  const int64_t blocks_per_seq = kModelLen / kBlockSize;
  std::vector<Seq> a(kSeqs), b;
  for (int64_t i = 0; i < kSeqs; ++i) {
    Seq& s = a[static_cast<size_t>(i)];
    for (int64_t t = 0; t < 30 + 17 * i; ++t) s.prompt.push_back(static_cast<int32_t>(7 * t + i));
    for (int64_t k = 0; k < blocks_per_seq; ++k) {
      s.table.push_back(static_cast<int32_t>(i * blocks_per_seq + k));
    }
    if (kv.num_sink_blocks > 0) s.table[0] = static_cast<int32_t>(kv.num_blocks + i);
  }
  b = a;
  std::vector<SampleOutput> a_samples, b_samples;  // every step's, in order

  // Step k of the sequences in `seqs`: the prompts (k == 0), else one decode token each, the
  // known one or (deferred) the previous step's sample of the sequence's row.
  ForwardBatchBuilder builder(kBlockSize, blocks_per_seq);
  std::vector<SamplingRow> rows;
  auto build = [&](std::vector<Seq>& seqs, int64_t k, bool deferred) {
    builder.clear();
    rows.clear();
    for (int64_t i = 0; i < kSeqs; ++i) {
      Seq& s = seqs[static_cast<size_t>(i)];
      const auto p = static_cast<int64_t>(s.prompt.size());
      const int32_t token =
          k == 0 ? 0
                 : (deferred ? static_cast<int32_t>(-1 - i) : s.out[static_cast<size_t>(k - 1)]);
      const int64_t computed = k == 0 ? 0 : p + k - 1;
      const std::vector<int32_t> one{token};
      const std::span<const int32_t> tokens = k == 0 ? std::span<const int32_t>(s.prompt) : one;
      const auto len = static_cast<size_t>(
          (computed + static_cast<int64_t>(tokens.size()) + kBlockSize - 1) / kBlockSize);
      builder.add(tokens, computed, std::span(s.table).first(len), static_cast<int32_t>(i), 0);
      builder.want_logits(builder.num_tokens() - 1);
      SamplingRow row;
      row.greedy = i % 2 == 0;
      row.temperature = 0.8;
      row.top_p = 0.9;
      row.num_logprobs = 2;
      row.rng_key = 1000 + static_cast<uint64_t>(i);
      row.prompt_token_ids = s.prompt;
      // Known outputs; the one in flight counts as a placeholder.
      row.output_token_ids = s.out;
      row.num_output_placeholders = k - static_cast<int64_t>(s.out.size());
      rows.push_back(row);
    }
    ForwardBatch batch = builder.batch();
    batch.sampling = rows;
    return batch;
  };
  auto keep = [&](std::vector<Seq>& seqs, std::span<const SampleOutput> out,
                  std::vector<SampleOutput>& all) {
    ASSERT_EQ(out.size(), static_cast<size_t>(kSeqs));
    for (int64_t i = 0; i < kSeqs; ++i) {
      seqs[static_cast<size_t>(i)].out.push_back(out[static_cast<size_t>(i)].token_id);
      all.push_back(out[static_cast<size_t>(i)]);
    }
  };

  for (int64_t k = 0; k < kSteps; ++k)
    keep(b, (*stepwise)->forward(build(b, k, false)).samples, b_samples);
  (*pipelined)->submit(build(a, 0, false));
  for (int64_t k = 1; k < kSteps; ++k) {
    (*pipelined)->submit(build(a, k, true));  // step k - 1 is still in flight
    keep(a, (*pipelined)->wait().samples, a_samples);
  }
  keep(a, (*pipelined)->wait().samples, a_samples);

  ASSERT_EQ(a_samples.size(), b_samples.size());
  for (size_t r = 0; r < a_samples.size(); ++r) {
    const SampleOutput &x = a_samples[r], &y = b_samples[r];
    EXPECT_EQ(x.token_id, y.token_id) << "step " << r / kSeqs << " row " << r % kSeqs;
    EXPECT_EQ(x.logprob, y.logprob) << "step " << r / kSeqs << " row " << r % kSeqs;
    EXPECT_EQ(x.rank, y.rank);
    ASSERT_EQ(x.top_logprobs.size(), y.top_logprobs.size());
    for (size_t t = 0; t < x.top_logprobs.size(); ++t) {
      EXPECT_EQ(x.top_logprobs[t].token_id, y.top_logprobs[t].token_id);
      EXPECT_EQ(x.top_logprobs[t].logprob, y.top_logprobs[t].logprob);
    }
  }
#ifdef S4KV_ASYNC_CUDA
  // Decode steps (all but the first) replayed graphs, unless eager.
  EXPECT_EQ(cuda::cuda_graph_replays(**pipelined), c.enforce_eager ? 0 : kSteps - 1);
#endif
}

#ifdef S4KV_ASYNC_CUDA
INSTANTIATE_TEST_SUITE_P(
    Cuda, AsyncBackend,
    ::testing::Values(Case{"cuda_16bit", "cuda", kv::KvCacheDtype::k16Bit},
                      Case{"cuda_16bit_eager", "cuda", kv::KvCacheDtype::k16Bit, true},
                      Case{"cuda_int4_v2", "cuda", kv::KvCacheDtype::kInt4Kivi},
                      Case{"cuda_int4_v2_eager", "cuda", kv::KvCacheDtype::kInt4Kivi, true}),
    [](const auto& info) { return std::string(info.param.name); });
#else
INSTANTIATE_TEST_SUITE_P(Cpu, AsyncBackend,
                         ::testing::Values(Case{"cpu_16bit", "cpu", kv::KvCacheDtype::k16Bit},
                                           Case{"cpu_int4_v2", "cpu", kv::KvCacheDtype::kInt4Kivi}),
                         [](const auto& info) { return std::string(info.param.name); });
#endif

}  // namespace
}  // namespace s4kv::backend
