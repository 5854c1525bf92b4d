// AsyncEngine over the FakeBackend (tests/backend/fake_backend.h): properties that must hold
// exactly, whatever the CPU, the BLAS kernels or the thread timing.
//   - Isolation: 32 requests submitted at once (31 threads, while the engine thread is held in
//     a step; greedy, seeded sampling, n = 2; prompts sharing full blocks so that the prefix
//     cache hits; a KV pool small enough to preempt) each produce exactly what they produce
//     alone, and greedy ones exactly the cache-free reference; no step reads a KV slot of
//     another prefix. The FakeBackend's logits do not depend on the batch, so any difference
//     is an engine bug (a wrong block, a lost or repeated token, a seed applied to the wrong
//     sequence), never rounding.
//   - Heartbeat: a step held inside forward() by the latch turns healthy() false after the
//     heartbeat timeout while the state stays kReady, and true again once the step ends.
#include <gtest/gtest.h>

#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engine_stream.h"
#include "fake_backend.h"
#include "server/async_engine.h"

namespace s4kv::server {
namespace {

using backend::testing::FakeBackendProbe;
using std::chrono::milliseconds;
using test_util::eventually;
using test_util::kDeadline;
using test_util::Stream;

constexpr int kNumRequests = 32;
constexpr int kBlockSize = 32;
constexpr int64_t kBytesPerToken16 = 6144;  // s4kv-tiny, 16-bit K and V: 6 layers x 2 x 2 x 128 x 2

engine::EngineArgs fake_args(std::shared_ptr<FakeBackendProbe> probe, int64_t num_blocks) {
  engine::EngineArgs a;
  a.model = "models/s4kv-tiny";  // config and tokenizer only: no weights are loaded
  a.config.kv_cache_dtype = kv::KvCacheDtype::k16Bit;
  a.config.block_size = kBlockSize;
  a.config.max_model_len = 512;
  a.config.max_num_seqs = 16;
  a.config.max_num_batched_tokens = 256;  // long prompts prefill in chunks
  a.config.kv_cache_memory_bytes = num_blocks * kBlockSize * kBytesPerToken16;
  a.backend_factory = backend::testing::fake_backend_factory(std::move(probe));
  return a;
}

struct FakeHarness {
  std::shared_ptr<FakeBackendProbe> probe = std::make_shared<FakeBackendProbe>();
  engine::LlmEngine loaded;
  Metrics metrics;
  std::unique_ptr<AsyncEngine> engine;

  explicit FakeHarness(int64_t num_blocks, AsyncEngineOptions options = {})
      : loaded(load(probe, num_blocks)),
        metrics("s4kv-tiny", kv_capacity_info(loaded), loaded.engine->max_model_len()) {
    options.log_requests = false;
    options.stats_interval = milliseconds(0);
    engine = std::make_unique<AsyncEngine>(std::move(loaded), options, metrics);
  }
  static engine::LlmEngine load(std::shared_ptr<FakeBackendProbe> probe, int64_t num_blocks) {
    auto e = engine::load_llm_engine(fake_args(std::move(probe), num_blocks));
    S4KV_CHECK(e.is_ok(), e.status().message());
    return std::move(e).value();
  }
  uint64_t submit(Stream& s, const std::vector<int32_t>& prompt, const engine::SamplingParams& p) {
    EngineRequest r;
    r.id = "cmpl-fake";
    r.prompt_token_ids = prompt;
    r.params = p;
    r.channel = s.channel();
    auto ticket = engine->submit(std::move(r));
    S4KV_CHECK(ticket.is_ok(), ticket.status().message());
    return *ticket;
  }
  double counter(const std::string& name) const {
    std::istringstream in(metrics.render());
    const std::string series = name + "{model_name=\"s4kv-tiny\"} ";
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind(series, 0) == 0) return std::stod(line.substr(series.size()));
    }
    return -1;
  }
};

// Request i: prompts of 4 groups share a 96-token prefix (3 full blocks), then a tail of its
// own; every eighth is short. Greedy, seeded sampling, or n = 2 seeded.
struct Case {
  std::vector<int32_t> prompt;
  engine::SamplingParams params;
};

Case make_case(int i) {
  Case c;
  if (i % 8 == 7) {
    for (int j = 0; j < 5; ++j) c.prompt.push_back(100 + 13 * i + j);
  } else {
    for (int j = 0; j < 96; ++j) c.prompt.push_back((j * 31 + (i % 4) * 977) % 8000);
    for (int j = 0; j < 1 + (i * 7) % 50; ++j) c.prompt.push_back((i * 101 + j * 17) % 8000);
  }
  c.params.ignore_eos = true;
  c.params.max_tokens = 16 + (i % 5) * 8;
  if (i % 3 == 0) {
    c.params.temperature = 0.0;
  } else {
    c.params.temperature = i % 3 == 1 ? 1.0 : 0.8;
    c.params.seed = 1000 + i;
    c.params.n = i % 3 == 1 ? 1 : 2;
  }
  return c;
}

// A finished stream's tokens per sequence index.
std::vector<std::vector<int32_t>> by_index(const Stream& s) {
  std::vector<std::vector<int32_t>> out;
  for (const EngineEvent& e : s.events()) {
    if (!e.output) continue;
    for (const auto& co : e.output->outputs) {
      if (out.size() <= static_cast<size_t>(co.index)) out.resize(co.index + 1);
      out[co.index].insert(out[co.index].end(), co.token_ids.begin(), co.token_ids.end());
    }
  }
  return out;
}

TEST(AsyncEngineFake, ConcurrentRequestsProduceExactlyWhatTheyProduceAlone) {
  std::vector<Case> cases;
  for (int i = 0; i < kNumRequests; ++i) cases.push_back(make_case(i));

  // Alone: one request at a time on an engine of the same config.
  FakeHarness solo(/*num_blocks=*/40);
  std::vector<std::vector<std::vector<int32_t>>> alone;
  for (const Case& c : cases) {
    Stream s;
    solo.submit(s, c.prompt, c.params);
    ASSERT_TRUE(s.wait_end());
    ASSERT_FALSE(s.events().back().error.has_value());
    alone.push_back(by_index(s));
  }

  // Together: the engine thread is held inside the first request's step while 31 threads
  // submit at once, so that all of them meet in the scheduler whatever the thread timing: 40
  // blocks hold about 7 of them, the rest wait or get preempted.
  FakeHarness h(/*num_blocks=*/40);
  std::vector<Stream> streams(cases.size());
  h.probe->latch.arm();
  h.submit(streams[0], cases[0].prompt, cases[0].params);
  ASSERT_TRUE(h.probe->latch.wait_held(kDeadline));
  std::vector<std::thread> threads;
  std::atomic<int> ready{0};
  for (size_t i = 1; i < cases.size(); ++i) {
    threads.emplace_back([&, i] {
      ready.fetch_add(1);
      while (ready.load() < kNumRequests - 1) std::this_thread::yield();
      h.submit(streams[i], cases[i].prompt, cases[i].params);
    });
  }
  for (std::thread& t : threads) t.join();
  h.probe->latch.release();
  for (size_t i = 0; i < cases.size(); ++i) ASSERT_TRUE(streams[i].wait_end()) << i;

  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    const auto got = by_index(streams[i]);
    ASSERT_EQ(got.size(), static_cast<size_t>(cases[i].params.n));
    EXPECT_EQ(got, alone[i]);
    for (const auto& seq : got)
      EXPECT_EQ(seq.size(), static_cast<size_t>(*cases[i].params.max_tokens));
    if (cases[i].params.temperature == 0.0) {
      EXPECT_EQ(got[0], backend::testing::fake_greedy(cases[i].prompt, *cases[i].params.max_tokens,
                                                      h.engine->vocab_size()));
    }
  }
  EXPECT_TRUE(eventually([&] { return h.engine->num_unfinished() == 0; }));
  EXPECT_EQ(h.probe->num_stale_reads.load(), 0);
  EXPECT_EQ(solo.probe->num_stale_reads.load(), 0);
  // The run exercised what isolation is about: shared prefix blocks and preemption.
  const double preemptions = h.counter("vllm:num_preemptions_total");
  const double hits = h.counter("vllm:prefix_cache_hits_total");
  std::printf(
      "[ fake     ] %d concurrent requests: %.0f preemptions, %.0f prefix-cache hit tokens\n",
      kNumRequests, preemptions, hits);
  EXPECT_GT(preemptions, 0);
  EXPECT_GT(hits, 0);
}

TEST(AsyncEngineFake, StepLongerThanHeartbeatTimeoutIsUnhealthyUntilItBeatsAgain) {
  AsyncEngineOptions options;
  options.heartbeat_timeout = milliseconds(150);  // above the 100 ms idle wake-up
  FakeHarness h(/*num_blocks=*/40, options);
  ASSERT_TRUE(eventually([&] { return h.engine->healthy(); }));
  h.probe->latch.arm();
  Stream s;
  engine::SamplingParams p;
  p.temperature = 0.0;
  p.max_tokens = 2;
  h.submit(s, {1, 2, 3}, p);
  ASSERT_TRUE(h.probe->latch.wait_held(kDeadline));
  // The engine thread is inside forward(): no beat until it returns.
  EXPECT_TRUE(eventually([&] { return !h.engine->healthy(); }));
  EXPECT_EQ(h.engine->state(), EngineState::kReady);
  s.drain();
  EXPECT_TRUE(s.events().empty());
  h.probe->latch.release();
  ASSERT_TRUE(s.wait_end());
  EXPECT_EQ(by_index(s), (std::vector<std::vector<int32_t>>{
                             backend::testing::fake_greedy({1, 2, 3}, 2, h.engine->vocab_size())}));
  EXPECT_TRUE(eventually([&] { return h.engine->healthy(); }));
}

}  // namespace
}  // namespace s4kv::server
