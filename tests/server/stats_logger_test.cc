// StatsLogger on a simulated clock: throughput over the interval, hit rate over the interval,
// nothing before the interval, one idle line after activity and then silence.
#include "server/stats_logger.h"

#include <gtest/gtest.h>

namespace s4kv::server {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = StatsLogger::Clock;

TEST(StatsLogger, ThroughputAndHitRateOverTheInterval) {
  const Clock::time_point t0{};
  StatsLogger stats(milliseconds(10000), t0);
  EngineSnapshot s{.num_running = 3,
                   .num_waiting = 1,
                   .kv_cache_usage = 0.0425,
                   .prefix_cache_queries = 800,
                   .prefix_cache_hits = 300,
                   .prompt_tokens = 1000,
                   .generation_tokens = 250};
  EXPECT_FALSE(stats.poll(t0 + seconds(9), s).has_value());  // interval not over
  auto line = stats.poll(t0 + seconds(10), s);
  ASSERT_TRUE(line.has_value());
  EXPECT_EQ(*line,
            "Avg prompt throughput: 100.0 tokens/s, Avg generation throughput: 25.0 tokens/s, "
            "Running: 3 reqs, Waiting: 1 reqs, KV cache usage: 4.2%, Prefix cache hit rate: "
            "37.5%");
  // The next interval counts only what came after: 64 of 100 new queried tokens hit.
  s.generation_tokens += 40;
  s.prefix_cache_queries += 100;
  s.prefix_cache_hits += 64;
  line = stats.poll(t0 + seconds(30), s);  // 20 s later
  ASSERT_TRUE(line.has_value());
  EXPECT_EQ(*line,
            "Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 2.0 tokens/s, "
            "Running: 3 reqs, Waiting: 1 reqs, KV cache usage: 4.2%, Prefix cache hit rate: "
            "64.0%");
}

TEST(StatsLogger, OneIdleLineAfterActivityThenSilence) {
  const Clock::time_point t0{};
  StatsLogger stats(milliseconds(1000), t0);
  const EngineSnapshot idle{};
  EXPECT_FALSE(stats.poll(t0 + seconds(5), idle).has_value());  // never active: quiet
  const EngineSnapshot after{.generation_tokens = 10};
  ASSERT_TRUE(stats.poll(t0 + seconds(6), after).has_value());  // the active interval
  auto line = stats.poll(t0 + seconds(7), after);               // the first idle one
  ASSERT_TRUE(line.has_value());
  EXPECT_EQ(*line,
            "Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s, "
            "Running: 0 reqs, Waiting: 0 reqs, KV cache usage: 0.0%, Prefix cache hit rate: "
            "0.0%");
  EXPECT_FALSE(stats.poll(t0 + seconds(8), after).has_value());
  EXPECT_FALSE(stats.poll(t0 + seconds(60), after).has_value());
  // A waiting request is activity even before any token.
  const EngineSnapshot waiting{.num_waiting = 2, .generation_tokens = 10};
  line = stats.poll(t0 + seconds(61), waiting);
  ASSERT_TRUE(line.has_value());
  EXPECT_NE(line->find("Waiting: 2 reqs"), std::string::npos) << *line;
}

}  // namespace
}  // namespace s4kv::server
