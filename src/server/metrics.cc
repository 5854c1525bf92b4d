// Metrics: the counters, gauges and histograms behind GET /metrics, and their rendering in the
// Prometheus text exposition format 0.0.4. Bucket bounds are vLLM's, so dashboards and alert
// rules written against `vllm serve` read the same series.
//
// Invariants: every series carries model_name; request_success_total always has the series
// stop, length and abort (0 until seen); histogram buckets are cumulative and end in +Inf,
// whose count equals _count. Threads: any; every member is read or written under mu_.
#include "server/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <utility>

#include "common/check.h"

namespace s4kv::server {
namespace {

// vLLM's bounds (vllm/v1/metrics/loggers.py), in seconds.
const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                          0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                          20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kInterTokenBuckets = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,
                                                0.3,  0.4,   0.5,  0.75,  1.0, 2.5,  5.0,
                                                7.5,  10.0,  20.0, 40.0,  80.0};
const std::vector<double> kRequestLatencyBuckets = {
    0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
    30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

// 1, 2, 5, 10, 20, 50, ... up to max_value (vLLM's build_1_2_5_buckets).
std::vector<double> one_two_five_buckets(int64_t max_value) {
  std::vector<double> out;
  for (int64_t scale = 1; scale <= max_value; scale *= 10) {
    for (int64_t m : {1, 2, 5}) {
      if (m * scale > max_value) return out;
      out.push_back(static_cast<double>(m * scale));
    }
  }
  return out;
}

// Shortest text that reads back as the same double; "+Inf"/"-Inf"/"NaN" as Prometheus spells
// them.
std::string format_double(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), v);
  S4KV_CHECK(res.ec == std::errc(), "to_chars failed");
  return std::string(buf, res.ptr);
}

// A bucket bound as Python's prometheus_client writes it ("1.0", "0.25"), so le labels are
// the strings vLLM exports.
std::string format_le(double v) {
  std::string s = format_double(v);
  if (s.find_first_of(".eEIN") == std::string::npos) s += ".0";
  return s;
}

// Label values escape backslash, double quote and newline.
std::string escape_label(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// Appends text in the exposition format for one metric family at a time.
class Writer {
 public:
  explicit Writer(std::string_view model_name)
      : label_("model_name=\"" + escape_label(model_name) + "\"") {}

  void header(std::string_view name, std::string_view type, std::string_view help) {
    out_.append("# HELP ").append(name).append(" ").append(help).append("\n");
    out_.append("# TYPE ").append(name).append(" ").append(type).append("\n");
  }
  // One sample; `extra` is more labels ("finished_reason=\"stop\"") or empty.
  void sample(std::string_view name, std::string_view extra, std::string_view value) {
    out_.append(name).append("{").append(label_);
    if (!extra.empty()) out_.append(",").append(extra);
    out_.append("} ").append(value).append("\n");
  }
  void gauge(std::string_view name, std::string_view help, double value) {
    header(name, "gauge", help);
    sample(name, "", format_double(value));
  }
  void counter(std::string_view name, std::string_view help, int64_t value) {
    header(name, "counter", help);
    sample(name, "", std::to_string(value));
  }
  void histogram(std::string_view name, std::string_view help, const Histogram& h) {
    header(name, "histogram", help);
    const std::string bucket = std::string(name) + "_bucket";
    const std::vector<uint64_t> counts = h.cumulative_counts();
    for (size_t i = 0; i < counts.size(); ++i) {
      sample(bucket, "le=\"" + format_le(h.upper_bounds()[i]) + "\"", std::to_string(counts[i]));
    }
    sample(bucket, "le=\"+Inf\"", std::to_string(h.count()));
    sample(std::string(name) + "_sum", "", format_double(h.sum()));
    sample(std::string(name) + "_count", "", std::to_string(h.count()));
  }
  std::string take() { return std::move(out_); }

 private:
  std::string label_;
  std::string out_;
};

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)), bucket_counts_(upper_bounds_.size() + 1, 0) {
  S4KV_CHECK(
      std::is_sorted(upper_bounds_.begin(), upper_bounds_.end()) &&
          std::adjacent_find(upper_bounds_.begin(), upper_bounds_.end()) == upper_bounds_.end(),
      "histogram bounds must be strictly ascending");
}

void Histogram::observe(double value) {
  if (std::isnan(value)) return;  // would poison sum; no bucket holds it
  const auto it = std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), value);
  ++bucket_counts_[static_cast<size_t>(it - upper_bounds_.begin())];
  ++count_;
  sum_ += value;
}

std::vector<uint64_t> Histogram::cumulative_counts() const {
  std::vector<uint64_t> out(upper_bounds_.size());
  uint64_t running = 0;
  for (size_t i = 0; i < upper_bounds_.size(); ++i) {
    running += bucket_counts_[i];
    out[i] = running;
  }
  return out;
}

Metrics::Metrics(std::string model_name, KvCapacityInfo kv, int64_t max_model_len)
    : model_name_(std::move(model_name)),
      kv_(kv),
      time_to_first_token_(kTtftBuckets),
      inter_token_latency_(kInterTokenBuckets),
      e2e_request_latency_(kRequestLatencyBuckets),
      queue_time_(kRequestLatencyBuckets),
      request_prompt_tokens_(
          one_two_five_buckets(max_model_len > 0 ? max_model_len : kDefaultTokenBucketsMax)),
      request_generation_tokens_(
          one_two_five_buckets(max_model_len > 0 ? max_model_len : kDefaultTokenBucketsMax)) {
  for (const char* reason : {"stop", "length", "abort"}) request_success_total_[reason] = 0;
}

void Metrics::set_scheduler_state(int num_running, int num_waiting, double kv_cache_usage,
                                  int64_t num_preemptions_total, int64_t prefix_cache_queries_total,
                                  int64_t prefix_cache_hits_total) {
  std::lock_guard<std::mutex> lock(mu_);
  num_running_ = num_running;
  num_waiting_ = num_waiting;
  kv_cache_usage_ = kv_cache_usage;
  num_preemptions_total_ = num_preemptions_total;
  prefix_cache_queries_total_ = prefix_cache_queries_total;
  prefix_cache_hits_total_ = prefix_cache_hits_total;
}

void Metrics::add_prompt_tokens(int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  prompt_tokens_total_ += n;
}

void Metrics::add_generation_tokens(int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  generation_tokens_total_ += n;
}

std::pair<int64_t, int64_t> Metrics::token_totals() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {prompt_tokens_total_, generation_tokens_total_};
}

void Metrics::observe_time_to_first_token(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  time_to_first_token_.observe(seconds);
}

void Metrics::observe_inter_token_latency(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  inter_token_latency_.observe(seconds);
}

void Metrics::observe_queue_time(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  queue_time_.observe(seconds);
}

void Metrics::on_request_finished(std::string_view finished_reason, int64_t num_prompt_tokens,
                                  int64_t num_generation_tokens, double e2e_seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = request_success_total_.find(finished_reason);
  if (it == request_success_total_.end()) {
    it = request_success_total_.emplace(std::string(finished_reason), 0).first;
  }
  ++it->second;
  request_prompt_tokens_.observe(static_cast<double>(num_prompt_tokens));
  request_generation_tokens_.observe(static_cast<double>(num_generation_tokens));
  e2e_request_latency_.observe(e2e_seconds);
}

std::string Metrics::render() const {
  std::lock_guard<std::mutex> lock(mu_);
  Writer w(model_name_);
  w.gauge("vllm:num_requests_running", "Requests in the running batch now.", num_running_);
  w.gauge("vllm:num_requests_waiting", "Requests queued, not yet running.", num_waiting_);
  w.gauge("vllm:kv_cache_usage_perc", "Fraction of KV cache blocks in use (0..1).",
          kv_cache_usage_);
  w.gauge("vllm:gpu_cache_usage_perc",
          "Same as vllm:kv_cache_usage_perc (older name, kept for dashboards).", kv_cache_usage_);
  w.gauge("s4kv_kv_cache_capacity_tokens", "Tokens the KV cache pool holds in its dtype.",
          static_cast<double>(kv_.capacity_tokens));
  w.gauge("s4kv_kv_bytes_per_token", "KV cache bytes per token, all layers, keys and values.",
          kv_.bytes_per_token);
  w.gauge("s4kv_kv_density_ratio", "16-bit KV bytes per token divided by this cache's.",
          kv_.density_ratio);
  w.counter("vllm:prompt_tokens_total", "Prompt tokens of requests admitted.",
            prompt_tokens_total_);
  w.counter("vllm:generation_tokens_total", "Tokens generated.", generation_tokens_total_);
  w.header("vllm:request_success_total", "counter", "Requests ended, by finish reason.");
  for (const auto& [reason, count] : request_success_total_) {
    w.sample("vllm:request_success_total", "finished_reason=\"" + escape_label(reason) + "\"",
             std::to_string(count));
  }
  w.counter("vllm:num_preemptions_total", "Requests preempted (KV blocks freed, recomputed later).",
            num_preemptions_total_);
  w.counter("vllm:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.",
            prefix_cache_queries_total_);
  w.counter("vllm:prefix_cache_hits_total", "Prompt tokens found in the prefix cache.",
            prefix_cache_hits_total_);
  w.histogram("vllm:time_to_first_token_seconds",
              "Seconds from arrival to the first generated token.", time_to_first_token_);
  w.histogram("vllm:inter_token_latency_seconds",
              "Seconds between consecutive token steps of a request.", inter_token_latency_);
  w.histogram("vllm:e2e_request_latency_seconds", "Seconds from arrival to the end of a request.",
              e2e_request_latency_);
  w.histogram("vllm:request_queue_time_seconds",
              "Seconds a request waited before the engine took it.", queue_time_);
  w.histogram("vllm:request_prompt_tokens", "Prompt tokens per finished request.",
              request_prompt_tokens_);
  w.histogram("vllm:request_generation_tokens", "Generated tokens per finished request.",
              request_generation_tokens_);
  return w.take();
}

}  // namespace s4kv::server
