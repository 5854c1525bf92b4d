#include "server/stats_logger.h"

#include <cstdio>

namespace s4kv::server {

StatsLogger::StatsLogger(std::chrono::milliseconds interval, Clock::time_point start)
    : interval_(interval), last_time_(start) {}

std::optional<std::string> StatsLogger::poll(Clock::time_point now, const EngineSnapshot& s) {
  if (!due(now)) return std::nullopt;
  const int64_t prompt_tokens = s.prompt_tokens - last_.prompt_tokens;
  const int64_t generation_tokens = s.generation_tokens - last_.generation_tokens;
  const int64_t queries = s.prefix_cache_queries - last_.prefix_cache_queries;
  const int64_t hits = s.prefix_cache_hits - last_.prefix_cache_hits;
  const double seconds = std::chrono::duration<double>(now - last_time_).count();
  const bool was_active = last_was_active_;
  const bool active =
      prompt_tokens > 0 || generation_tokens > 0 || s.num_running > 0 || s.num_waiting > 0;
  last_time_ = now;
  last_ = s;
  last_was_active_ = active;
  if (!active && !was_active) return std::nullopt;  // idle and already said so

  const double hit_rate = queries > 0 ? 100.0 * static_cast<double>(hits) / queries : 0.0;
  char line[256];
  std::snprintf(line, sizeof(line),
                "Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f tokens/s, "
                "Running: %lld reqs, Waiting: %lld reqs, KV cache usage: %.1f%%, "
                "Prefix cache hit rate: %.1f%%",
                static_cast<double>(prompt_tokens) / seconds,
                static_cast<double>(generation_tokens) / seconds,
                static_cast<long long>(s.num_running), static_cast<long long>(s.num_waiting),
                100.0 * s.kv_cache_usage, hit_rate);
  return std::string(line);
}

}  // namespace s4kv::server
