// StatsLogger: the periodic engine line of `vllm serve` (every 10 s by default, off with
// --disable-log-stats): prompt and generation throughput over the interval, running and
// waiting requests, KV cache usage and the prefix-cache hit rate over the interval, e.g.
//   Avg prompt throughput: 812.4 tokens/s, Avg generation throughput: 96.0 tokens/s,
//   Running: 3 reqs, Waiting: 0 reqs, KV cache usage: 4.2%, Prefix cache hit rate: 37.5%
// An idle engine logs one line after its last activity, then stays quiet. Engine thread only;
// it formats lines and leaves the logging to its caller.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace s4kv::server {

struct EngineSnapshot {
  int64_t num_running = 0;
  int64_t num_waiting = 0;
  double kv_cache_usage = 0.0;       // 0..1
  int64_t prefix_cache_queries = 0;  // totals since start, in tokens
  int64_t prefix_cache_hits = 0;
  int64_t prompt_tokens = 0;      // totals since start (vllm:prompt_tokens_total)
  int64_t generation_tokens = 0;  // vllm:generation_tokens_total
};

// Rates and the hit rate are differences between the snapshot at one line and at the last.
class StatsLogger {
 public:
  using Clock = std::chrono::steady_clock;

  StatsLogger(std::chrono::milliseconds interval, Clock::time_point start);

  // Whether `interval` has passed since the last line (take a snapshot only then).
  bool due(Clock::time_point now) const { return now - last_time_ >= interval_; }
  // The line due at `now`: once due, when there was activity since the last line or the engine
  // is busy, or the previous line reported activity.
  std::optional<std::string> poll(Clock::time_point now, const EngineSnapshot& s);

 private:
  std::chrono::milliseconds interval_;
  Clock::time_point last_time_;
  EngineSnapshot last_;  // the counters at the last line
  bool last_was_active_ = false;
};

}  // namespace s4kv::server
