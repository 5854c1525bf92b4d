// Async scheduling (--async-scheduling) against the synchronous engine: the same workload must
// give the same outputs, token for token (ids, text, logprobs, finish reasons, stop strings).
// The model is the FakeBackend (tests/backend/fake_backend.h): batch-invariant and exact, so
// any difference is the engine's. The workload mixes prompt lengths (chunked prefill), greedy
// and seeded draws, n > 1, logprobs, stop strings, stop token ids, min_tokens, max_tokens and
// max_model_len ends, penalties (the synchronous fallback), arrivals while steps are in flight,
// aborts, and, with a tiny KV cache, preemption. The pool and the scheduler's invariants are
// checked after every step, and no step reads stale KV.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "engine/llm_engine.h"
#include "fake_backend.h"

namespace s4kv::engine {
namespace {

using backend::testing::FakeBackendProbe;

constexpr int kBlockSize = 32;
constexpr int64_t kBytesPerToken16 = 6144;  // s4kv-tiny, 16-bit K and V
constexpr int64_t kMaxModelLen = 256;

struct Seq {
  std::vector<int32_t> ids;
  std::string text;
  std::vector<std::string> logprobs;  // "id rank logprob top..." per token
  std::optional<FinishReason> finish;
  std::optional<std::string> stop_str;
  std::optional<int32_t> stop_token_id;
};

struct WorkItem {
  std::vector<int32_t> prompt;
  SamplingParams params;
  int arrival_step = 0;
  int abort_step = -1;  // the step() call before which it is aborted; -1: never
};

struct RunResult {
  std::vector<std::vector<Seq>> seqs;  // by work item, then sequence index
  int64_t num_ahead = 0;
  int64_t num_preemptions = 0;
};

EngineArgs fake_args(std::shared_ptr<FakeBackendProbe> probe, int64_t num_blocks, bool async) {
  EngineArgs a;
  a.model = "models/s4kv-tiny";  // config and tokenizer only: no weights are loaded
  a.config.kv_cache_dtype = kv::KvCacheDtype::k16Bit;
  a.config.block_size = kBlockSize;
  a.config.max_model_len = kMaxModelLen;
  a.config.max_num_seqs = 16;
  a.config.max_num_batched_tokens = 128;  // long prompts prefill in chunks
  a.config.kv_cache_memory_bytes = num_blocks * kBlockSize * kBytesPerToken16;
  a.config.async_scheduling = async;
  a.backend_factory = backend::testing::fake_backend_factory(std::move(probe));
  return a;
}

std::string describe(const SampleOutput& s) {
  std::string d =
      std::to_string(s.token_id) + " " + std::to_string(s.rank) + " " + std::to_string(s.logprob);
  for (const auto& t : s.top_logprobs) {
    d += " " + std::to_string(t.token_id) + ":" + std::to_string(t.logprob);
  }
  return d;
}

RunResult run(const std::vector<WorkItem>& work, int64_t num_blocks, bool async) {
  auto probe = std::make_shared<FakeBackendProbe>();
  auto loaded = load_llm_engine(fake_args(probe, num_blocks, async));
  S4KV_CHECK(loaded.is_ok(), loaded.status().message());
  EngineCore& core = *loaded->engine;
  RunResult r;
  r.seqs.resize(work.size());
  std::map<RequestId, size_t> item_of;
  std::map<size_t, RequestId> id_of;
  int step = 0;
  const int last_arrival =
      std::max_element(work.begin(), work.end(), [](const WorkItem& a, const WorkItem& b) {
        return a.arrival_step < b.arrival_step;
      })->arrival_step;
  while (step <= last_arrival || core.has_unfinished()) {
    for (size_t i = 0; i < work.size(); ++i) {
      if (work[i].arrival_step == step) {
        auto id = core.add_request(work[i].prompt, work[i].params);
        S4KV_CHECK(id.is_ok(), id.status().message());
        item_of[*id] = i;
        id_of[i] = *id;
        r.seqs[i].resize(static_cast<size_t>(work[i].params.n));
      }
      if (work[i].abort_step == step && id_of.contains(i)) (void)core.abort(id_of[i]);
    }
    for (const RequestOutput& ro : core.step()) {
      std::vector<Seq>& seqs = r.seqs[item_of.at(ro.request_id)];
      for (const CompletionOutput& co : ro.outputs) {
        Seq& s = seqs.at(static_cast<size_t>(co.index));
        EXPECT_FALSE(s.finish.has_value()) << "output after finish";
        s.ids.insert(s.ids.end(), co.token_ids.begin(), co.token_ids.end());
        s.text += co.text;
        for (const SampleOutput& lp : co.logprobs) s.logprobs.push_back(describe(lp));
        if (co.finish_reason) s.finish = co.finish_reason;
        if (co.stop_str) s.stop_str = co.stop_str;
        if (co.stop_token_id) s.stop_token_id = co.stop_token_id;
      }
    }
    core.scheduler().check_invariants();
    ++step;
    S4KV_CHECK(step < 100000, "the engine made no progress");
  }
  // Nothing is left anywhere once every request has ended.
  const kv::KvCacheManager& kv = core.scheduler().kv_cache_manager();
  EXPECT_EQ(kv.num_requests(), 0);
  EXPECT_EQ(kv.pool().num_free_blocks(), kv.pool().num_blocks());
  EXPECT_EQ(probe->num_stale_reads.load(), 0);
  r.num_ahead = core.num_steps_scheduled_ahead();
  r.num_preemptions = core.scheduler().num_preemptions_total();
  return r;
}

SamplingParams seeded(int64_t seed, double temperature = 0.9) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_p = 0.95;
  p.seed = seed;
  return p;
}

// Requests of every kind; stop strings and stop token ids are taken from `ref` (the outputs of
// the same workload without them) so that they fire mid-generation.
std::vector<WorkItem> workload(uint32_t seed, const RunResult* ref) {
  std::mt19937 rng(seed);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<WorkItem> work;
  for (int i = 0; i < 48; ++i) {
    WorkItem w;
    const int len = uniform(1, 150);
    for (int t = 0; t < len; ++t) w.prompt.push_back(uniform(0, 8191));
    const int max_tokens = uniform(1, 40);
    switch (i % 8) {
      case 0:
        w.params.temperature = 0.0;
        w.params.logprobs = 2;
        break;
      case 1:
        w.params = seeded(i);
        w.params.logprobs = 1;
        break;
      case 2:
        w.params = seeded(i, 1.0);
        w.params.n = 3;
        break;
      case 3:  // a stop token id from the output
      case 6:  // the same, masked below min_tokens
        w.params = i % 2 == 0 ? seeded(i) : SamplingParams{};
        if (i % 2 != 0) w.params.temperature = 0.0;
        break;
      case 4:  // a stop string from the output
        w.params.temperature = 0.0;
        w.params.include_stop_str_in_output = uniform(0, 1) == 1;
        break;
      case 5:  // penalties read the output ids: the synchronous fallback
        w.params = seeded(i, 0.8);
        w.params.repetition_penalty = 1.3;
        w.params.frequency_penalty = 0.5;
        break;
      case 7:  // no max_tokens: max_model_len ends it
        w.params.temperature = 0.0;
        break;
    }
    if (i % 8 != 7) w.params.max_tokens = max_tokens;
    w.arrival_step = i < 24 ? 0 : uniform(0, 60);
    if (i % 7 == 3) w.abort_step = w.arrival_step + uniform(0, 30);
    if (ref != nullptr && (i % 8 == 3 || i % 8 == 6 || i % 8 == 4)) {
      const Seq& out = ref->seqs[static_cast<size_t>(i)][0];
      if (out.ids.size() >= 3) {
        // Its own generator: the workload's draws stay those of the run without stops.
        std::mt19937 pick(seed * 1000u + static_cast<uint32_t>(i));
        const size_t k = std::uniform_int_distribution<size_t>(1, out.ids.size() - 1)(pick);
        if (i % 8 == 4) {
          if (out.text.size() >= 6) w.params.stop = {out.text.substr(out.text.size() / 2, 2)};
        } else {
          w.params.stop_token_ids = {out.ids[k]};
          if (i % 8 == 6) {
            w.params.min_tokens = std::min<int64_t>(static_cast<int64_t>(k) + 1, max_tokens);
          }
        }
      }
    }
    work.push_back(std::move(w));
  }
  return work;
}

// Aborted requests stop at a time that depends on the engine's pace: their outputs must be a
// prefix of what they produce unaborted.
void expect_same(const RunResult& sync, const RunResult& async, const RunResult& unaborted,
                 const std::vector<WorkItem>& work) {
  for (size_t i = 0; i < work.size(); ++i) {
    for (size_t n = 0; n < sync.seqs[i].size(); ++n) {
      SCOPED_TRACE(::testing::Message() << "request " << i << " sequence " << n);
      const Seq& a = async.seqs[i][n];
      const Seq& s = sync.seqs[i][n];
      if (work[i].abort_step >= 0) {
        const Seq& u = unaborted.seqs[i][n];
        for (const Seq* x : {&a, &s}) {
          ASSERT_LE(x->ids.size(), u.ids.size());
          EXPECT_TRUE(std::equal(x->ids.begin(), x->ids.end(), u.ids.begin()));
        }
        continue;
      }
      EXPECT_EQ(a.ids, s.ids);
      EXPECT_EQ(a.text, s.text);
      EXPECT_EQ(a.logprobs, s.logprobs);
      EXPECT_EQ(a.finish, s.finish);
      EXPECT_EQ(a.stop_str, s.stop_str);
      EXPECT_EQ(a.stop_token_id, s.stop_token_id);
    }
  }
}

void compare(uint32_t seed, int64_t num_blocks) {
  std::vector<WorkItem> work = workload(seed, nullptr);
  for (WorkItem& w : work) w.abort_step = -1;
  const RunResult plain = run(work, num_blocks, false);
  work = workload(seed, &plain);
  std::vector<WorkItem> unaborted_work = work;
  for (WorkItem& w : unaborted_work) w.abort_step = -1;
  const RunResult unaborted = run(unaborted_work, num_blocks, false);
  const RunResult sync = run(work, num_blocks, false);
  const RunResult async = run(work, num_blocks, true);
  EXPECT_EQ(sync.num_ahead, 0);
  EXPECT_GT(async.num_ahead, 20) << "the async path was not exercised";
  expect_same(sync, async, unaborted, work);
  // Stops did fire (the workload is meant to end sequences mid-flight).
  int num_stopped = 0;
  for (const auto& seqs : sync.seqs) {
    for (const Seq& s : seqs) num_stopped += s.stop_str || s.stop_token_id ? 1 : 0;
  }
  EXPECT_GT(num_stopped, 4);
  if (num_blocks < 64) {
    EXPECT_GT(async.num_preemptions, 0);
  }
}

TEST(AsyncScheduling, SameOutputsAsSynchronous) {
  for (uint32_t seed = 0; seed < 3; ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    compare(seed, 512);
  }
}

TEST(AsyncScheduling, SameOutputsUnderPreemption) {
  for (uint32_t seed = 10; seed < 13; ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    compare(seed, 24);  // 768 tokens for 16 running sequences of up to 256
  }
}

}  // namespace
}  // namespace s4kv::engine
