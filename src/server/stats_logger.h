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
};

class StatsLogger {
 public:
  using Clock = std::chrono::steady_clock;

  StatsLogger(std::chrono::milliseconds interval, Clock::time_point start);

  void add_prompt_tokens(int64_t n) { prompt_tokens_ += n; }
  void add_generation_tokens(int64_t n) { generation_tokens_ += n; }

  // The line due at `now`: once `interval` has passed since the last one, when there was
  // activity in it or the engine is busy, or the previous line reported activity.
  std::optional<std::string> poll(Clock::time_point now, const EngineSnapshot& s);

 private:
  std::chrono::milliseconds interval_;
  Clock::time_point last_;
  int64_t prompt_tokens_ = 0;      // since the last line
  int64_t generation_tokens_ = 0;  // since the last line
  int64_t last_queries_ = 0;       // prefix-cache totals at the last line
  int64_t last_hits_ = 0;
  bool last_was_active_ = false;
};

}  // namespace s4kv::server
