// Metrics: the server's Prometheus metrics with vLLM's names, so that dashboards built for
// `vllm serve` keep working, plus S4 KV's own KV-capacity gauges. Rendered in the Prometheus
// text exposition format (version 0.0.4) for GET /metrics; `promtool check metrics` accepts it.
//
// Every series carries the label model_name="<served model name>" (as vLLM's do):
//   gauges     vllm:num_requests_running, vllm:num_requests_waiting,
//              vllm:kv_cache_usage_perc (0..1), vllm:gpu_cache_usage_perc (deprecated alias,
//              same value), s4kv_kv_cache_capacity_tokens, s4kv_kv_bytes_per_token,
//              s4kv_kv_density_ratio (16-bit bytes per token / this cache's)
//   counters   vllm:prompt_tokens_total, vllm:generation_tokens_total,
//              vllm:request_success_total{finished_reason="stop"|"length"|"abort"},
//              vllm:num_preemptions_total, vllm:prefix_cache_queries_total,
//              vllm:prefix_cache_hits_total (tokens, as vLLM counts them)
//   histograms vllm:time_to_first_token_seconds, vllm:inter_token_latency_seconds,
//              vllm:e2e_request_latency_seconds, vllm:request_queue_time_seconds,
//              vllm:request_prompt_tokens, vllm:request_generation_tokens (vLLM's buckets;
//              the token-count ones are 1-2-5 steps up to max_model_len)
// Each metric has HELP and TYPE lines; counters are named with _total as Prometheus wants
// (the TYPE line names the sample, _total included). `promtool check metrics` (2.42) parses
// it and complains only that names contain ':', which vLLM's names do; we keep vLLM's names.
//
// Thread-safe: the engine thread updates, HTTP threads render; one mutex.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace s4kv::server {

// Fixed at start-up.
struct KvCapacityInfo {
  int64_t capacity_tokens = 0;   // tokens the KV pool holds in its dtype
  double bytes_per_token = 0.0;  // this cache's bytes per token (all layers, K and V)
  double density_ratio = 1.0;    // 16-bit bytes per token / bytes_per_token
};

// A Prometheus histogram: cumulative buckets with fixed upper bounds, sum and count.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);  // ascending; +Inf is implied
  void observe(double value);
  const std::vector<double>& upper_bounds() const { return upper_bounds_; }
  // counts()[i]: observations <= upper_bounds()[i] (cumulative); the +Inf count is count().
  std::vector<uint64_t> cumulative_counts() const;
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<double> upper_bounds_;
  std::vector<uint64_t> bucket_counts_;  // per bucket, not cumulative; last is +Inf
  uint64_t count_ = 0;
  double sum_ = 0.0;
};

class Metrics {
 public:
  // max_model_len bounds the token-count histograms' buckets; 0: kDefaultTokenBucketsMax.
  Metrics(std::string model_name, KvCapacityInfo kv, int64_t max_model_len = 0);
  static constexpr int64_t kDefaultTokenBucketsMax = 131072;

  // Engine thread, after every step: the scheduler's state now.
  void set_scheduler_state(int num_running, int num_waiting, double kv_cache_usage,
                           int64_t num_preemptions_total, int64_t prefix_cache_queries_total,
                           int64_t prefix_cache_hits_total);
  // Engine thread: counters and latency observations as they happen.
  void add_prompt_tokens(int64_t n);
  void add_generation_tokens(int64_t n);
  void observe_time_to_first_token(double seconds);
  void observe_inter_token_latency(double seconds);
  void observe_queue_time(double seconds);
  // A request ended: its finish reason ("stop", "length", "abort"), its token counts and
  // arrival-to-end latency.
  void on_request_finished(std::string_view finished_reason, int64_t num_prompt_tokens,
                           int64_t num_generation_tokens, double e2e_seconds);

  // Any thread: vllm:prompt_tokens_total and vllm:generation_tokens_total.
  std::pair<int64_t, int64_t> token_totals() const;
  // Any thread: the exposition text (Content-Type: text/plain; version=0.0.4).
  std::string render() const;

 private:
  mutable std::mutex mu_;
  std::string model_name_;
  KvCapacityInfo kv_;
  int num_running_ = 0;
  int num_waiting_ = 0;
  double kv_cache_usage_ = 0.0;
  int64_t num_preemptions_total_ = 0;
  int64_t prefix_cache_queries_total_ = 0;
  int64_t prefix_cache_hits_total_ = 0;
  int64_t prompt_tokens_total_ = 0;
  int64_t generation_tokens_total_ = 0;
  std::map<std::string, int64_t, std::less<>> request_success_total_;  // by finished_reason
  Histogram time_to_first_token_;
  Histogram inter_token_latency_;
  Histogram e2e_request_latency_;
  Histogram queue_time_;
  Histogram request_prompt_tokens_;
  Histogram request_generation_tokens_;
};

}  // namespace s4kv::server
