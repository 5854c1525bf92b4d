// Test helpers for AsyncEngine: Stream, one request's consumer (collects its events as the
// engine thread notifies, waits with deadlines, never sleeps), and eventually(), a polling
// wait with a deadline. Shared by async_engine_test.cc and async_engine_fake_test.cc.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/async_engine.h"

namespace s4kv::server::test_util {

using Clock = std::chrono::steady_clock;

inline constexpr auto kDeadline = std::chrono::seconds(30);

// One request's consumer: collects its events as the engine thread notifies.
class Stream {
 public:
  // The notify callback owns the signal: the engine thread may still be inside it after the
  // consumer has seen the last event and destroyed the Stream.
  Stream()
      : signal_(std::make_shared<Signal>()),
        channel_(std::make_shared<RequestChannel>([signal = signal_] {
          {
            std::lock_guard<std::mutex> lock(signal->mu);
            signal->signaled = true;
          }
          signal->cv.notify_all();
        })) {}

  std::shared_ptr<RequestChannel> channel() const { return channel_; }

  // Takes events until `done` holds for them or the deadline passes; returns `done`.
  template <typename Pred>
  bool wait_for(Pred done, Clock::duration timeout = kDeadline) {
    const Clock::time_point deadline = Clock::now() + timeout;
    while (true) {
      drain();
      if (done(events_)) return true;
      std::unique_lock<std::mutex> lock(signal_->mu);
      if (!signal_->cv.wait_until(lock, deadline, [this] { return signal_->signaled; })) {
        lock.unlock();
        drain();
        return done(events_);
      }
      signal_->signaled = false;
    }
  }
  bool wait_end() {
    return wait_for([](const auto& ev) { return ended(ev); });
  }
  bool wait_tokens(size_t n) {
    return wait_for([this, n](const auto&) { return ids().size() >= n; });
  }

  void drain() {
    for (EngineEvent& e : channel_->take()) events_.push_back(std::move(e));
  }
  static bool ended(const std::vector<EngineEvent>& ev) {
    return !ev.empty() && (ev.back().error || (ev.back().output && ev.back().output->finished));
  }
  const std::vector<EngineEvent>& events() const { return events_; }
  std::vector<int32_t> ids() const {
    std::vector<int32_t> out;
    for (const EngineEvent& e : events_) {
      if (!e.output) continue;
      for (const auto& co : e.output->outputs) {
        out.insert(out.end(), co.token_ids.begin(), co.token_ids.end());
      }
    }
    return out;
  }
  std::string text() const {
    std::string out;
    for (const EngineEvent& e : events_) {
      if (!e.output) continue;
      for (const auto& co : e.output->outputs) out += co.text;
    }
    return out;
  }

 private:
  struct Signal {
    std::mutex mu;
    std::condition_variable cv;
    bool signaled = false;
  };
  std::shared_ptr<Signal> signal_;
  std::shared_ptr<RequestChannel> channel_;
  std::vector<EngineEvent> events_;
};

// Polls `cond` until it holds or the deadline passes.
template <typename Cond>
bool eventually(Cond cond, Clock::duration timeout = kDeadline) {
  const Clock::time_point deadline = Clock::now() + timeout;
  while (!cond()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

}  // namespace s4kv::server::test_util
