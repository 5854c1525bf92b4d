// AsyncEngine on the bundled s4kv-tiny model (CPU backend): a request's events equal a direct
// EngineCore run; concurrent submitters all finish; abort frees the KV and stops events;
// queue limit, drain and shutdown refuse or end requests with the right Status; metrics
// counters equal what the channels saw; the per-request log line; healthy() while idle.
// Requests are awaited through their channel's notify with deadlines of seconds, never sleeps.
// Exact isolation of concurrent requests and a step held past the heartbeat timeout are tested
// with the FakeBackend in async_engine_fake_test.cc.
#include "server/async_engine.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engine_stream.h"

namespace s4kv::server {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

using test_util::eventually;
using test_util::kDeadline;
using test_util::Stream;

engine::EngineArgs args(int max_num_seqs = 8) {
  engine::EngineArgs a;
  a.model = "models/s4kv-tiny";
  a.config.kv_cache_memory_bytes = int64_t{64} << 20;
  a.config.max_num_seqs = max_num_seqs;
  return a;
}

engine::LlmEngine load(const engine::EngineArgs& a) {
  auto e = engine::load_llm_engine(a);
  S4KV_CHECK(e.is_ok(), e.status().message());
  return std::move(e).value();
}

engine::SamplingParams greedy(int64_t max_tokens) {
  engine::SamplingParams p;
  p.temperature = 0.0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

// Metrics (declared first: it must outlive the engine) and the engine under test.
struct Harness {
  Metrics metrics;
  std::unique_ptr<AsyncEngine> engine;

  Harness(engine::LlmEngine e, AsyncEngineOptions options)
      : metrics("s4kv-tiny", kv_capacity_info(e), e.engine->max_model_len()),
        engine(std::make_unique<AsyncEngine>(std::move(e), options, metrics)) {}

  std::vector<int32_t> encode(const std::string& text) const {
    auto ids = engine->tokenizer().encode(text, true);
    S4KV_CHECK(ids.is_ok(), ids.status().message());
    return *ids;
  }
  // The value of one series ("name{labels}") in the current render; "" when absent.
  std::string sample(const std::string& series) const {
    std::istringstream in(metrics.render());
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind(series + " ", 0) == 0) return line.substr(series.size() + 1);
    }
    return "";
  }
};

std::unique_ptr<Harness> start(AsyncEngineOptions options = {}, int max_num_seqs = 8) {
  return std::make_unique<Harness>(load(args(max_num_seqs)), options);
}

std::string series(const std::string& name, const std::string& extra = "") {
  return name + "{model_name=\"s4kv-tiny\"" + (extra.empty() ? "" : "," + extra) + "}";
}

uint64_t submit(Harness& h, Stream& s, const std::string& id, std::vector<int32_t> prompt,
                const engine::SamplingParams& params) {
  EngineRequest r;
  r.id = id;
  r.prompt_token_ids = std::move(prompt);
  r.params = params;
  r.channel = s.channel();
  auto ticket = h.engine->submit(std::move(r));
  S4KV_CHECK(ticket.is_ok(), ticket.status().message());
  return *ticket;
}

TEST(AsyncEngine, GreedyEventsEqualDirectEngineCoreRunAndAreCounted) {
  const std::string prompt = "The history of the";
  // Reference: the same request stepped directly on an EngineCore of the same config.
  engine::LlmEngine ref = load(args());
  auto ref_prompt = ref.tokenizer->encode(prompt, true);
  ASSERT_TRUE(ref_prompt.is_ok());
  ASSERT_TRUE(ref.engine->add_request(*ref_prompt, greedy(24)).is_ok());
  std::vector<int32_t> ref_ids;
  std::string ref_text;
  while (ref.engine->has_unfinished()) {
    for (const auto& ro : ref.engine->step()) {
      for (const auto& co : ro.outputs) {
        ref_ids.insert(ref_ids.end(), co.token_ids.begin(), co.token_ids.end());
        ref_text += co.text;
      }
    }
  }
  ASSERT_EQ(ref_ids.size(), 24u);

  auto h = start();
  EXPECT_TRUE(h->engine->healthy());
  EXPECT_EQ(h->engine->state(), EngineState::kReady);
  EXPECT_EQ(h->engine->max_model_len(), ref.engine->max_model_len());
  Stream s;
  testing::internal::CaptureStderr();
  submit(*h, s, "cmpl-greedy-0", h->encode(prompt), greedy(24));
  ASSERT_TRUE(s.wait_end());
  ASSERT_TRUE(eventually([&] { return h->engine->num_unfinished() == 0; }));
  const std::string log = testing::internal::GetCapturedStderr();

  EXPECT_EQ(s.ids(), ref_ids);
  EXPECT_EQ(s.text(), ref_text);
  EXPECT_FALSE(s.text().empty());
  // One event per step that made progress; the last one finishes, with "length".
  EXPECT_EQ(s.events().size(), 24u);
  for (const EngineEvent& e : s.events()) {
    ASSERT_TRUE(e.output.has_value());
    EXPECT_FALSE(e.error.has_value());
    EXPECT_EQ(e.output->num_prompt_tokens, static_cast<int64_t>(ref_prompt->size()));
  }
  const auto& last = s.events().back().output->outputs.back();
  EXPECT_EQ(last.finish_reason, engine::FinishReason::kLength);
  EXPECT_TRUE(h->engine->healthy());

  const std::string n_prompt = std::to_string(ref_prompt->size());
  EXPECT_NE(log.find("[engine] request cmpl-greedy-0: prompt " + n_prompt +
                     " tokens, generated 24 tokens, ttft "),
            std::string::npos)
      << log;
  EXPECT_NE(log.find(" s, finish length\n"), std::string::npos) << log;

  EXPECT_EQ(h->sample(series("vllm:prompt_tokens_total")), n_prompt);
  EXPECT_EQ(h->sample(series("vllm:generation_tokens_total")), "24");
  EXPECT_EQ(h->sample(series("vllm:request_success_total", "finished_reason=\"length\"")), "1");
  EXPECT_EQ(h->sample(series("vllm:request_success_total", "finished_reason=\"stop\"")), "0");
  EXPECT_EQ(h->sample(series("vllm:time_to_first_token_seconds_count")), "1");
  EXPECT_EQ(h->sample(series("vllm:inter_token_latency_seconds_count")), "23");
  EXPECT_EQ(h->sample(series("vllm:request_queue_time_seconds_count")), "1");
  EXPECT_EQ(h->sample(series("vllm:e2e_request_latency_seconds_count")), "1");
  EXPECT_EQ(h->sample(series("vllm:request_generation_tokens_sum")), "24");
  EXPECT_EQ(h->sample(series("s4kv_kv_cache_capacity_tokens")),
            std::to_string(ref.engine->config().capacity.num_tokens));
}

TEST(AsyncEngine, RefusedRequestGetsTheEngineStatus) {
  auto h = start();
  Stream s;
  submit(*h, s, "cmpl-bad", {1, 2, 99999}, greedy(4));  // id outside the 8192-token vocab
  ASSERT_TRUE(s.wait_end());
  ASSERT_EQ(s.events().size(), 1u);
  ASSERT_TRUE(s.events()[0].error.has_value());
  EXPECT_EQ(s.events()[0].error->code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(eventually([&] { return h->engine->num_unfinished() == 0; }));
  EXPECT_EQ(h->sample(series("vllm:prompt_tokens_total")), "0");
  EXPECT_EQ(h->sample(series("vllm:request_success_total", "finished_reason=\"stop\"")), "0");
}

TEST(AsyncEngine, EightThreadsSubmitAtOnceAndAllFinish) {
  auto h = start();
  const std::vector<std::string> prompts = {
      "The history of the", "In the beginning", "PostgreSQL supports", "def main():\n",
      "The Linux kernel",   "Git is a",         "A dictionary",        "Debian is"};
  std::vector<Stream> streams(prompts.size());
  std::vector<std::vector<int32_t>> encoded;
  int64_t prompt_sum = 0;
  for (const std::string& p : prompts) {
    encoded.push_back(h->encode(p));
    prompt_sum += static_cast<int64_t>(encoded.back().size());
  }
  std::vector<std::thread> threads;
  std::vector<int> ok(prompts.size(), 0);
  for (size_t i = 0; i < prompts.size(); ++i) {
    threads.emplace_back([&, i] {
      submit(*h, streams[i], "cmpl-" + std::to_string(i), encoded[i], greedy(16));
      ok[i] = streams[i].wait_end() ? 1 : 0;
    });
  }
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(ok[i], 1) << i;
    EXPECT_EQ(streams[i].ids().size(), 16u) << i;
    EXPECT_TRUE(streams[i].events().back().output->finished) << i;
  }
  ASSERT_TRUE(eventually([&] { return h->engine->num_unfinished() == 0; }));
  EXPECT_EQ(h->sample(series("vllm:prompt_tokens_total")), std::to_string(prompt_sum));
  EXPECT_EQ(h->sample(series("vllm:generation_tokens_total")), "128");
  EXPECT_EQ(h->sample(series("vllm:request_success_total", "finished_reason=\"length\"")), "8");
  EXPECT_EQ(h->sample(series("vllm:request_prompt_tokens_sum")), std::to_string(prompt_sum));
  EXPECT_TRUE(eventually([&] { return h->sample(series("vllm:num_requests_running")) == "0"; }));
}

TEST(AsyncEngine, AbortStopsEventsAndFreesKvCache) {
  auto h = start();
  Stream s;
  const uint64_t ticket =
      submit(*h, s, "cmpl-abort", h->encode("The history of the"), greedy(2000));
  ASSERT_TRUE(s.wait_tokens(3));
  EXPECT_EQ(h->sample(series("vllm:num_requests_running")), "1");
  h->engine->abort(ticket);
  ASSERT_TRUE(eventually([&] { return h->engine->num_unfinished() == 0; }));
  // Gauges reach the idle state promptly, with no step to run.
  EXPECT_TRUE(eventually([&] {
    return h->sample(series("vllm:num_requests_running")) == "0" &&
           h->sample(series("vllm:kv_cache_usage_perc")) == "0";
  }));
  EXPECT_EQ(h->sample(series("vllm:request_success_total", "finished_reason=\"abort\"")), "1");
  s.drain();
  const size_t num_events = s.events().size();
  const size_t num_ids = s.ids().size();
  EXPECT_LT(num_ids, 2000u);
  for (const EngineEvent& e : s.events()) {
    ASSERT_TRUE(e.output.has_value());  // no error event for an abort
    EXPECT_FALSE(e.output->finished);
  }
  EXPECT_EQ(h->sample(series("vllm:generation_tokens_total")), std::to_string(num_ids));

  // A later request runs to its end; the aborted one got nothing meanwhile.
  Stream next;
  submit(*h, next, "cmpl-next", h->encode("Git is a"), greedy(8));
  ASSERT_TRUE(next.wait_end());
  s.drain();
  EXPECT_EQ(s.events().size(), num_events);
  h->engine->abort(ticket);  // finished tickets are ignored
  EXPECT_EQ(next.ids().size(), 8u);
}

TEST(AsyncEngine, QueueLimitRefusesWithResourceExhausted) {
  AsyncEngineOptions options;
  options.max_queued_requests = 2;
  auto h = start(options, /*max_num_seqs=*/1);
  Stream busy;
  const uint64_t busy_ticket =
      submit(*h, busy, "cmpl-busy", h->encode("The history of the"), greedy(2000));
  ASSERT_TRUE(busy.wait_tokens(1));  // running: the one seat is taken
  std::vector<std::unique_ptr<Stream>> accepted;
  int num_refused = 0;
  for (int i = 0; i < 10; ++i) {
    auto s = std::make_unique<Stream>();
    EngineRequest r;
    r.id = "cmpl-q" + std::to_string(i);
    r.prompt_token_ids = h->encode("Git is a");
    r.params = greedy(4);
    r.channel = s->channel();
    auto ticket = h->engine->submit(std::move(r));
    if (ticket.is_ok()) {
      accepted.push_back(std::move(s));
    } else {
      EXPECT_EQ(ticket.status().code(), StatusCode::kResourceExhausted);
      ++num_refused;
    }
  }
  EXPECT_EQ(accepted.size(), 2u);
  EXPECT_EQ(num_refused, 8);
  h->engine->abort(busy_ticket);
  for (auto& s : accepted) {
    ASSERT_TRUE(s->wait_end());
    EXPECT_EQ(s->ids().size(), 4u);
  }
}

TEST(AsyncEngine, DrainRefusesNewRequestsWhileRunningOnesFinish) {
  auto h = start();
  Stream s;
  submit(*h, s, "cmpl-drain", h->encode("In the beginning"), greedy(32));
  ASSERT_TRUE(s.wait_tokens(1));
  h->engine->begin_drain();
  EXPECT_EQ(h->engine->state(), EngineState::kDraining);
  EXPECT_FALSE(h->engine->healthy());
  Stream refused;
  EngineRequest r;
  r.id = "cmpl-late";
  r.prompt_token_ids = h->encode("Git is a");
  r.params = greedy(4);
  r.channel = refused.channel();
  auto ticket = h->engine->submit(std::move(r));
  ASSERT_FALSE(ticket.is_ok());
  EXPECT_EQ(ticket.status().code(), StatusCode::kUnavailable);
  ASSERT_TRUE(s.wait_end());
  EXPECT_EQ(s.ids().size(), 32u);
  EXPECT_TRUE(s.events().back().output->finished);
  h->engine->shutdown(Clock::now() + seconds(10));
  EXPECT_EQ(h->engine->state(), EngineState::kStopped);
}

TEST(AsyncEngine, ShutdownDeadlineAbortsLongRequestWithUnavailable) {
  auto h = start();
  Stream s;
  submit(*h, s, "cmpl-long", h->encode("The history of the"), greedy(2000));
  ASSERT_TRUE(s.wait_tokens(1));
  const Clock::time_point t0 = Clock::now();
  h->engine->shutdown(Clock::now() + milliseconds(200));
  EXPECT_LT(Clock::now() - t0, seconds(20));  // returned: the engine thread is joined
  EXPECT_EQ(h->engine->state(), EngineState::kStopped);
  EXPECT_FALSE(h->engine->healthy());
  EXPECT_EQ(h->engine->num_unfinished(), 0);
  s.drain();
  ASSERT_FALSE(s.events().empty());
  const EngineEvent& last = s.events().back();
  ASSERT_TRUE(last.error.has_value());
  EXPECT_EQ(last.error->code(), StatusCode::kUnavailable);
  EXPECT_EQ(last.error->message(), "the server is shutting down");
  EXPECT_LT(s.ids().size(), 2000u);
  EXPECT_EQ(h->sample(series("vllm:request_success_total", "finished_reason=\"abort\"")), "1");
  EXPECT_EQ(h->sample(series("vllm:num_requests_running")), "0");
  EXPECT_EQ(h->sample(series("vllm:kv_cache_usage_perc")), "0");

  Stream after;
  EngineRequest r;
  r.prompt_token_ids = {1, 2};
  r.channel = after.channel();
  auto ticket = h->engine->submit(std::move(r));
  ASSERT_FALSE(ticket.is_ok());
  EXPECT_EQ(ticket.status().code(), StatusCode::kUnavailable);
  h->engine->shutdown(Clock::now());  // idempotent
  EXPECT_EQ(h->engine->state(), EngineState::kStopped);
}

TEST(AsyncEngine, IdleEngineKeepsBeating) {
  AsyncEngineOptions options;
  options.heartbeat_timeout = seconds(1);
  auto h = start(options);
  // Idle for three heartbeat timeouts: the 100 ms wake-ups keep it healthy throughout.
  const Clock::time_point end = Clock::now() + seconds(3);
  int num_checks = 0;
  while (Clock::now() < end) {
    EXPECT_TRUE(h->engine->healthy());
    ++num_checks;
    std::this_thread::sleep_for(milliseconds(50));
  }
  EXPECT_GT(num_checks, 10);
  EXPECT_EQ(h->sample(series("vllm:num_requests_running")), "0");
}

TEST(AsyncEngine, LogOptionsTurnRequestLinesOffAndStatsLinesOn) {
  AsyncEngineOptions options;
  options.log_requests = false;
  options.stats_interval = milliseconds(200);
  auto h = start(options);
  testing::internal::CaptureStderr();
  Stream s;
  submit(*h, s, "cmpl-quiet", h->encode("The history of the"), greedy(8));
  ASSERT_TRUE(s.wait_end());
  ASSERT_TRUE(eventually([&] { return h->engine->num_unfinished() == 0; }));
  std::this_thread::sleep_for(milliseconds(700));  // past two intervals: the idle line too
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_EQ(log.find("request cmpl-quiet"), std::string::npos) << log;
  EXPECT_NE(log.find("[engine] Avg prompt throughput: "), std::string::npos) << log;
  EXPECT_NE(log.find("Running: 0 reqs, Waiting: 0 reqs, KV cache usage: 0.0%"), std::string::npos)
      << log;
}

}  // namespace
}  // namespace s4kv::server
