// Metrics: the exposition text has every vLLM name with HELP and TYPE, the model_name label
// (escaped), cumulative histogram buckets ending in +Inf, counters that add up, all three
// finish-reason series from the start; and promtool accepts it (fresh and after observations).
#include "server/metrics.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace s4kv::server {
namespace {

constexpr const char* kPromtool = "/usr/bin/promtool";
const std::string kLabel = "{model_name=\"tiny\"";

KvCapacityInfo kv_info() {
  KvCapacityInfo kv;
  kv.capacity_tokens = 159744;
  kv.bytes_per_token = 3360.0;
  kv.density_ratio = 3.657142857142857;
  return kv;
}

// Every sample line as "name{labels}" -> value text.
std::map<std::string, std::string> samples(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    EXPECT_NE(space, std::string::npos) << line;
    EXPECT_TRUE(out.emplace(line.substr(0, space), line.substr(space + 1)).second)
        << "duplicate series " << line;
  }
  return out;
}

std::string series(const std::string& name, const std::string& extra = "") {
  return name + kLabel + (extra.empty() ? "" : "," + extra) + "}";
}

TEST(Histogram, CumulativeBucketsWithBoundsInclusive) {
  Histogram h({0.1, 1.0, 10.0});
  for (double v : {0.05, 0.1, 0.5, 1.0, 20.0, 30.0}) h.observe(v);
  EXPECT_EQ(h.cumulative_counts(), (std::vector<uint64_t>{2, 4, 4}));
  EXPECT_EQ(h.count(), 6u);
  EXPECT_NEAR(h.sum(), 51.65, 1e-12);
}

TEST(Metrics, FreshRenderHasEveryFamilyWithHelpTypeAndZeroes) {
  Metrics m("tiny", kv_info(), 4096);
  const std::string text = m.render();
  const std::vector<std::pair<std::string, std::string>> families = {
      {"vllm:num_requests_running", "gauge"},
      {"vllm:num_requests_waiting", "gauge"},
      {"vllm:kv_cache_usage_perc", "gauge"},
      {"vllm:gpu_cache_usage_perc", "gauge"},
      {"s4kv_kv_cache_capacity_tokens", "gauge"},
      {"s4kv_kv_bytes_per_token", "gauge"},
      {"s4kv_kv_density_ratio", "gauge"},
      {"vllm:prompt_tokens_total", "counter"},
      {"vllm:generation_tokens_total", "counter"},
      {"vllm:request_success_total", "counter"},
      {"vllm:num_preemptions_total", "counter"},
      {"vllm:prefix_cache_queries_total", "counter"},
      {"vllm:prefix_cache_hits_total", "counter"},
      {"vllm:time_to_first_token_seconds", "histogram"},
      {"vllm:inter_token_latency_seconds", "histogram"},
      {"vllm:e2e_request_latency_seconds", "histogram"},
      {"vllm:request_queue_time_seconds", "histogram"},
      {"vllm:request_prompt_tokens", "histogram"},
      {"vllm:request_generation_tokens", "histogram"},
  };
  for (const auto& [name, type] : families) {
    EXPECT_NE(text.find("# HELP " + name + " "), std::string::npos) << name;
    EXPECT_NE(text.find("# TYPE " + name + " " + type + "\n"), std::string::npos) << name;
  }
  const auto s = samples(text);
  EXPECT_EQ(s.at(series("vllm:num_requests_running")), "0");
  EXPECT_EQ(s.at(series("vllm:kv_cache_usage_perc")), "0");
  EXPECT_EQ(s.at(series("s4kv_kv_cache_capacity_tokens")), "159744");
  EXPECT_EQ(s.at(series("s4kv_kv_bytes_per_token")), "3360");
  EXPECT_EQ(s.at(series("s4kv_kv_density_ratio")), "3.657142857142857");
  for (const char* reason : {"stop", "length", "abort"}) {
    EXPECT_EQ(s.at(series("vllm:request_success_total",
                          std::string("finished_reason=\"") + reason + "\"")),
              "0")
        << reason;
  }
  EXPECT_EQ(s.at(series("vllm:time_to_first_token_seconds_bucket", "le=\"+Inf\"")), "0");
  EXPECT_EQ(s.at(series("vllm:time_to_first_token_seconds_count")), "0");
  // Token-count buckets: 1-2-5 steps up to max_model_len.
  EXPECT_EQ(s.count(series("vllm:request_prompt_tokens_bucket", "le=\"2000.0\"")), 1u);
  EXPECT_EQ(s.count(series("vllm:request_prompt_tokens_bucket", "le=\"5000.0\"")), 0u);
}

TEST(Metrics, ObservationsLandInCumulativeBucketsAndCountersAddUp) {
  Metrics m("tiny", kv_info(), 4096);
  for (double v : {0.003, 0.05, 0.06, 3000.0}) m.observe_time_to_first_token(v);
  m.observe_inter_token_latency(0.02);
  m.observe_inter_token_latency(0.2);
  m.observe_queue_time(0.0);
  m.add_prompt_tokens(12);
  m.add_prompt_tokens(30);
  m.add_generation_tokens(1);
  m.add_generation_tokens(40);
  m.on_request_finished("stop", 12, 40, 0.4);
  m.on_request_finished("stop", 30, 1, 2.0);
  m.on_request_finished("length", 30, 7, 700.0);
  m.set_scheduler_state(3, 5, 0.25, 2, 640, 128);
  const auto s = samples(m.render());

  const std::string ttft = "vllm:time_to_first_token_seconds";
  EXPECT_EQ(s.at(series(ttft + "_bucket", "le=\"0.001\"")), "0");
  EXPECT_EQ(s.at(series(ttft + "_bucket", "le=\"0.005\"")), "1");
  EXPECT_EQ(s.at(series(ttft + "_bucket", "le=\"0.04\"")), "1");
  EXPECT_EQ(s.at(series(ttft + "_bucket", "le=\"0.06\"")), "3");  // 0.06 is <= 0.06
  EXPECT_EQ(s.at(series(ttft + "_bucket", "le=\"2560.0\"")), "3");
  EXPECT_EQ(s.at(series(ttft + "_bucket", "le=\"+Inf\"")), "4");
  EXPECT_EQ(s.at(series(ttft + "_count")), "4");
  EXPECT_NEAR(std::stod(s.at(series(ttft + "_sum"))), 3000.113, 1e-9);

  EXPECT_EQ(s.at(series("vllm:inter_token_latency_seconds_bucket", "le=\"0.025\"")), "1");
  EXPECT_EQ(s.at(series("vllm:inter_token_latency_seconds_bucket", "le=\"0.2\"")), "2");
  EXPECT_EQ(s.at(series("vllm:request_queue_time_seconds_bucket", "le=\"0.3\"")), "1");
  EXPECT_EQ(s.at(series("vllm:e2e_request_latency_seconds_bucket", "le=\"0.5\"")), "1");
  EXPECT_EQ(s.at(series("vllm:e2e_request_latency_seconds_bucket", "le=\"2.0\"")), "2");
  EXPECT_EQ(s.at(series("vllm:e2e_request_latency_seconds_bucket", "le=\"480.0\"")), "2");
  EXPECT_EQ(s.at(series("vllm:e2e_request_latency_seconds_bucket", "le=\"960.0\"")), "3");
  EXPECT_EQ(s.at(series("vllm:request_prompt_tokens_bucket", "le=\"20.0\"")), "1");
  EXPECT_EQ(s.at(series("vllm:request_prompt_tokens_bucket", "le=\"50.0\"")), "3");
  EXPECT_EQ(s.at(series("vllm:request_prompt_tokens_sum")), "72");
  EXPECT_EQ(s.at(series("vllm:request_generation_tokens_bucket", "le=\"1.0\"")), "1");
  EXPECT_EQ(s.at(series("vllm:request_generation_tokens_bucket", "le=\"10.0\"")), "2");
  EXPECT_EQ(s.at(series("vllm:request_generation_tokens_sum")), "48");

  EXPECT_EQ(s.at(series("vllm:prompt_tokens_total")), "42");
  EXPECT_EQ(s.at(series("vllm:generation_tokens_total")), "41");
  EXPECT_EQ(s.at(series("vllm:request_success_total", "finished_reason=\"stop\"")), "2");
  EXPECT_EQ(s.at(series("vllm:request_success_total", "finished_reason=\"length\"")), "1");
  EXPECT_EQ(s.at(series("vllm:request_success_total", "finished_reason=\"abort\"")), "0");
  EXPECT_EQ(s.at(series("vllm:num_requests_running")), "3");
  EXPECT_EQ(s.at(series("vllm:num_requests_waiting")), "5");
  EXPECT_EQ(s.at(series("vllm:kv_cache_usage_perc")), "0.25");
  EXPECT_EQ(s.at(series("vllm:gpu_cache_usage_perc")), "0.25");
  EXPECT_EQ(s.at(series("vllm:num_preemptions_total")), "2");
  EXPECT_EQ(s.at(series("vllm:prefix_cache_queries_total")), "640");
  EXPECT_EQ(s.at(series("vllm:prefix_cache_hits_total")), "128");
}

TEST(Metrics, ModelNameLabelIsEscaped) {
  Metrics m("a\"b\\c\nd", kv_info());
  const std::string text = m.render();
  EXPECT_NE(text.find("vllm:num_requests_running{model_name=\"a\\\"b\\\\c\\nd\"} 0\n"),
            std::string::npos);
}

TEST(Metrics, ConcurrentUpdatesAndRendersLoseNothing) {
  Metrics m("tiny", kv_info());
  std::thread writer([&] {
    for (int i = 0; i < 2000; ++i) {
      m.add_generation_tokens(1);
      m.observe_inter_token_latency(0.01);
      m.set_scheduler_state(i % 4, 0, 0.5, i, 0, 0);
    }
  });
  size_t num_renders = 0;
  for (int i = 0; i < 50; ++i) num_renders += m.render().empty() ? 0 : 1;
  writer.join();
  const auto s = samples(m.render());
  EXPECT_EQ(num_renders, 50u);
  EXPECT_EQ(s.at(series("vllm:generation_tokens_total")), "2000");
  EXPECT_EQ(s.at(series("vllm:inter_token_latency_seconds_count")), "2000");
  EXPECT_EQ(s.at(series("vllm:num_preemptions_total")), "1999");
}

struct ToolRun {
  int exit_code = -1;
  std::string output;
};

// Feeds `text` to `promtool check metrics` on stdin; its exit code and combined output.
ToolRun promtool_check(const std::string& text) {
  const std::filesystem::path file = std::filesystem::temp_directory_path() /
                                     ("s4kv_metrics_test_" + std::to_string(::getpid()) + ".prom");
  std::ofstream(file) << text;
  const std::string cmd = std::string(kPromtool) + " check metrics < '" + file.string() + "' 2>&1";
  ToolRun run;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return run;
  char buf[512];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) run.output.append(buf, n);
  const int status = ::pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::filesystem::remove(file);
  return run;
}

// promtool's only complaint about our text is vLLM's ':' in names (promlint wants it for
// recording rules); with ':' replaced it must be silent, which checks everything else.
void expect_promtool_accepts(const std::string& text) {
  std::string plain = text;
  for (char& c : plain) {
    if (c == ':') c = '_';
  }
  const ToolRun clean = promtool_check(plain);
  EXPECT_EQ(clean.exit_code, 0) << clean.output;
  EXPECT_EQ(clean.output, "");

  const ToolRun raw = promtool_check(text);
  std::istringstream in(raw.output);
  std::string line;
  int num_lines = 0;
  while (std::getline(in, line)) {
    ++num_lines;
    EXPECT_NE(line.find("metric names should not contain ':'"), std::string::npos) << line;
    EXPECT_EQ(line.rfind("vllm:", 0), 0u) << line;
  }
  EXPECT_EQ(num_lines, 16);  // one per vllm: family, nothing else
}

TEST(Metrics, PromtoolAcceptsFreshRender) {
  if (!std::filesystem::exists(kPromtool)) GTEST_SKIP() << "promtool not installed";
  Metrics m("tiny", kv_info(), 4096);
  expect_promtool_accepts(m.render());
}

TEST(Metrics, PromtoolAcceptsRenderAfterObservations) {
  if (!std::filesystem::exists(kPromtool)) GTEST_SKIP() << "promtool not installed";
  Metrics m("Qwen/Qwen2.5-0.5B \"x\"", kv_info(), 32768);
  m.observe_time_to_first_token(0.031);
  m.observe_inter_token_latency(0.012);
  m.observe_queue_time(0.001);
  m.add_prompt_tokens(12);
  m.add_generation_tokens(40);
  m.on_request_finished("stop", 12, 40, 0.412);
  m.on_request_finished("abort", 3, 0, 0.05);
  m.set_scheduler_state(1, 0, 0.125, 0, 12, 0);
  expect_promtool_accepts(m.render());
}

}  // namespace
}  // namespace s4kv::server
