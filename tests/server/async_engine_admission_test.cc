// AsyncEngine admission counts sequences (prompts x n), not requests (F3: one request of
// 1024 prompts x n 128 took 131,072 sequences past a limit of 1024 and locked every other
// client out): a submission whose sequences can never wait is refused with kInvalidArgument
// and queues nothing; one that does not fit now with kResourceExhausted; a group of requests
// is admitted all or none. The engine's one seat is held by a long request (awaited through
// its channel, never timed), so that what is submitted after it waits.
#include <gtest/gtest.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "server/async_engine.h"

namespace s4kv::server {
namespace {

constexpr auto kDeadline = std::chrono::seconds(60);

// A channel whose events the test awaits.
struct Sink {
  std::shared_ptr<std::mutex> mu = std::make_shared<std::mutex>();
  std::shared_ptr<std::condition_variable> cv = std::make_shared<std::condition_variable>();
  std::shared_ptr<std::vector<EngineEvent>> events = std::make_shared<std::vector<EngineEvent>>();
  std::shared_ptr<RequestChannel> channel;

  Sink() {
    channel = std::make_shared<RequestChannel>([mu = mu, cv = cv] {
      std::lock_guard<std::mutex> lock(*mu);
      cv->notify_all();
    });
  }
  // Waits until the events taken so far satisfy done.
  template <typename Pred>
  bool wait(Pred done) {
    const auto deadline = std::chrono::steady_clock::now() + kDeadline;
    std::unique_lock<std::mutex> lock(*mu);
    while (true) {
      for (EngineEvent& e : channel->take()) events->push_back(std::move(e));
      if (done(*events)) return true;
      if (cv->wait_until(lock, deadline) == std::cv_status::timeout) {
        for (EngineEvent& e : channel->take()) events->push_back(std::move(e));
        return done(*events);
      }
    }
  }
  bool wait_started() {
    return wait([](const auto& ev) {
      for (const EngineEvent& e : ev)
        if (e.output && !e.output->outputs.empty()) return true;
      return false;
    });
  }
  bool wait_end() {
    return wait([](const auto& ev) {
      return !ev.empty() && (ev.back().error || (ev.back().output && ev.back().output->finished));
    });
  }
};

EngineRequest request(const Sink& sink, int64_t n, int64_t max_tokens) {
  EngineRequest r;
  r.id = "cmpl-admission";
  r.prompt_token_ids = {1, 2, 3, 4};
  r.params.n = n;
  r.params.temperature = n > 1 ? 1.0 : 0.0;
  r.params.seed = 7;
  r.params.max_tokens = max_tokens;
  r.params.ignore_eos = true;
  r.channel = sink.channel;
  return r;
}

class AdmissionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    engine::EngineArgs a;
    a.model = "models/s4kv-tiny";
    a.config.kv_cache_memory_bytes = int64_t{64} << 20;
    a.config.max_num_seqs = 1;  // one seat: what comes after the busy request waits
    auto e = engine::load_llm_engine(a);
    ASSERT_TRUE(e.is_ok()) << e.status().message();
    metrics_ =
        std::make_unique<Metrics>("s4kv-tiny", kv_capacity_info(*e), e->engine->max_model_len());
    AsyncEngineOptions options;
    options.max_queued_requests = 4;
    options.log_requests = false;
    engine_ = std::make_unique<AsyncEngine>(std::move(e).value(), options, *metrics_);
  }
  void TearDown() override {
    if (engine_) engine_->shutdown(std::chrono::steady_clock::now());
  }

  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<AsyncEngine> engine_;
};

TEST_F(AdmissionTest, SequencesThatCanNeverWaitAreRefusedAndQueueNothing) {
  Sink sink;
  // One request of n 8 against a limit of 4 sequences (before: admitted as one request).
  auto one = engine_->submit(request(sink, 8, 4));
  ASSERT_FALSE(one.is_ok());
  EXPECT_EQ(one.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(one.status().message().find("8 sequences"), std::string::npos)
      << one.status().message();
  EXPECT_NE(one.status().message().find("--max-queued-requests"), std::string::npos);
  // F3's shape: many prompts x n, each request alone within the limit.
  std::vector<Sink> sinks(3);
  std::vector<EngineRequest> group;
  for (const Sink& s : sinks) group.push_back(request(s, 2, 4));
  auto many = engine_->submit_all(std::move(group));
  ASSERT_FALSE(many.is_ok());
  EXPECT_EQ(many.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(engine_->num_unfinished(), 0);
}

TEST_F(AdmissionTest, WaitingSequencesAreCountedAndGroupsAdmittedAllOrNone) {
  Sink busy;
  auto busy_ticket = engine_->submit(request(busy, 1, engine_->max_model_len() - 8));
  ASSERT_TRUE(busy_ticket.is_ok());
  ASSERT_TRUE(busy.wait_started());  // it holds the one seat until aborted
  Sink a;
  ASSERT_TRUE(engine_->submit(request(a, 3, 4)).is_ok());  // 3 of 4 sequences waiting
  Sink b1, b2;
  std::vector<EngineRequest> group;
  group.push_back(request(b1, 1, 4));
  group.push_back(request(b2, 1, 4));
  auto b = engine_->submit_all(std::move(group));  // 3 + 2 > 4: neither is queued
  ASSERT_FALSE(b.is_ok());
  EXPECT_EQ(b.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(engine_->num_unfinished(), 2);
  Sink c;
  ASSERT_TRUE(engine_->submit(request(c, 1, 4)).is_ok());  // 3 + 1 = 4 fits
  Sink d;
  auto refused = engine_->submit(request(d, 1, 4));
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  engine_->abort(*busy_ticket);
  EXPECT_TRUE(a.wait_end());
  EXPECT_TRUE(c.wait_end());
  // Once they have run the queue is empty again.
  Sink e;
  ASSERT_TRUE(engine_->submit(request(e, 4, 2)).is_ok());
  EXPECT_TRUE(e.wait_end());
}

}  // namespace
}  // namespace s4kv::server
