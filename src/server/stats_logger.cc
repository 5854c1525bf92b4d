#include "server/stats_logger.h"

#include <cstdio>

namespace s4kv::server {

StatsLogger::StatsLogger(std::chrono::milliseconds interval, Clock::time_point start)
    : interval_(interval), last_(start) {}

std::optional<std::string> StatsLogger::poll(Clock::time_point now, const EngineSnapshot& s) {
  if (now - last_ < interval_) return std::nullopt;
  const bool active =
      prompt_tokens_ > 0 || generation_tokens_ > 0 || s.num_running > 0 || s.num_waiting > 0;
  if (!active && !last_was_active_) {
    last_ = now;  // idle and already said so: nothing to report
    last_queries_ = s.prefix_cache_queries;
    last_hits_ = s.prefix_cache_hits;
    return std::nullopt;
  }
  const double seconds = std::chrono::duration<double>(now - last_).count();
  const int64_t queries = s.prefix_cache_queries - last_queries_;
  const int64_t hits = s.prefix_cache_hits - last_hits_;
  const double hit_rate = queries > 0 ? 100.0 * static_cast<double>(hits) / queries : 0.0;
  char line[256];
  std::snprintf(line, sizeof(line),
                "Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f tokens/s, "
                "Running: %lld reqs, Waiting: %lld reqs, KV cache usage: %.1f%%, "
                "Prefix cache hit rate: %.1f%%",
                static_cast<double>(prompt_tokens_) / seconds,
                static_cast<double>(generation_tokens_) / seconds,
                static_cast<long long>(s.num_running), static_cast<long long>(s.num_waiting),
                100.0 * s.kv_cache_usage, hit_rate);
  last_ = now;
  prompt_tokens_ = 0;
  generation_tokens_ = 0;
  last_queries_ = s.prefix_cache_queries;
  last_hits_ = s.prefix_cache_hits;
  last_was_active_ = active;
  return std::string(line);
}

}  // namespace s4kv::server
