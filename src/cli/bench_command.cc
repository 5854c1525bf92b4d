#include "cli/bench_command.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <fstream>
#include <memory>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cli/bench_workload.h"
#include "cli/command.h"
#include "common/json.h"
#include "engine/llm_engine.h"
#include "kv/kv_format.h"

namespace s4kv::cli {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

Status check_at_least(int64_t value, int64_t least, const char* flag) {
  if (value >= least) return Status::ok();
  return invalid_argument(std::string(flag) + " must be at least " + std::to_string(least) +
                          ", got " + std::to_string(value));
}

// Every request's prompt plus its output must fit max_model_len (the resolved one: --max-model-len,
// or min(the model's, what the KV cache holds) when it is not given).
Status check_lengths(int64_t input_len, int64_t output_len, int64_t max_model_len) {
  if (input_len + output_len <= max_model_len) return Status::ok();
  return invalid_argument("--input-len " + std::to_string(input_len) + " + --output-len " +
                          std::to_string(output_len) + " = " +
                          std::to_string(input_len + output_len) + " tokens exceed max_model_len " +
                          std::to_string(max_model_len) +
                          " (raise --max-model-len, or lower --input-len or --output-len)");
}

// A loaded engine and the ids its random prompts draw from.
struct Bench {
  engine::LlmEngine llm;
  std::vector<int32_t> pool;
};

Result<Bench> load_bench(const EngineFlags& flags, int64_t input_len, int64_t output_len) {
  S4KV_ASSIGN_OR_RETURN(engine::EngineArgs args, engine_args(flags));
  args.config.offline = true;  // vLLM's benchmarks run its LLM class
  // Given explicitly, the limit is known before anything loads.
  if (flags.max_model_len > 0) {
    S4KV_RETURN_IF_ERROR(check_lengths(input_len, output_len, flags.max_model_len));
  }
  Bench b;
  S4KV_ASSIGN_OR_RETURN(b.llm, engine::load_llm_engine(args));
  std::fprintf(stderr, "INFO %s\n", b.llm.capacity_line.c_str());
  S4KV_RETURN_IF_ERROR(check_lengths(input_len, output_len, b.llm.engine->max_model_len()));
  b.pool = prompt_token_pool(*b.llm.tokenizer, b.llm.model_config.vocab_size);
  if (b.pool.empty())
    return invalid_argument(b.llm.model_dir + ": the tokenizer has no ordinary ids");
  return b;
}

engine::SamplingParams bench_params(int64_t output_len) {
  engine::SamplingParams p;
  p.temperature = 1.0;
  p.top_p = 1.0;
  p.ignore_eos = true;
  p.max_tokens = output_len;
  return p;
}

// The backend's name; on cuda with the KV cache sized by profiling, also the GPU the capacity
// line names ("... (device cuda; NVIDIA H200 (sm_90, 139 GiB): ...").
std::string device_label(const engine::LlmEngine& llm) {
  const std::string prefix = "(device cuda; ";
  const size_t at = llm.capacity_line.find(prefix);
  if (at == std::string::npos) return llm.device;
  const size_t start = at + prefix.size();
  const size_t end = llm.capacity_line.find(": ", start);
  if (end == std::string::npos) return llm.device;
  return llm.device + ": " + llm.capacity_line.substr(start, end - start);
}

OrderedJson settings_json(const Bench& b, const EngineFlags& flags, const std::string& command) {
  const engine::ResolvedEngineConfig& c = b.llm.engine->config();
  return {{"command", command},
          {"device", device_label(b.llm)},
          {"kv_cache_dtype", kv::kv_cache_dtype_name(c.kv.dtype)},
          {"model", flags.model},
          {"max_model_len", c.scheduler.max_model_len},
          {"max_num_seqs", c.scheduler.max_num_seqs},
          {"max_num_batched_tokens", c.scheduler.max_num_batched_tokens},
          {"async_scheduling", c.scheduler.async_scheduling}};
}

Status write_json(const std::string& path, const OrderedJson& j) {
  std::ofstream out(path);
  out << j.dump(1) << "\n";
  if (!out) return io_error(path + ": cannot write");
  return Status::ok();
}

// One batch run to completion: every prompt added at once, then the engine stepped until every
// request has finished, each step timed.
struct BatchRun {
  double seconds = 0.0;  // the adds and every step
  int64_t num_prompt_tokens = 0;
  int64_t num_output_tokens = 0;
  double prefill_seconds = 0.0;  // the steps until every request had its first token
  // Decode-only steps (every request had its first token before the step; a request preempted
  // after that recomputes its prefix in one of them): their times, the unfinished requests'
  // count and their context lengths (prompt + tokens generated, the new token included).
  std::vector<double> decode_seconds;
  // Of each decode step's time, what the engine thread spent inside the backend's wait() (blocked
  // on the device); the rest is the step's host time (scheduling, the batch, submission, output
  // processing: what async scheduling overlaps with the device).
  std::vector<double> decode_wait_seconds;
  int64_t min_batch = INT64_MAX, max_batch = 0;
  int64_t min_context = INT64_MAX, max_context = 0;
};

void note_decode_step(const std::unordered_map<engine::RequestId, int64_t>& generated,
                      int64_t input_len, BatchRun& run) {
  run.min_batch = std::min(run.min_batch, static_cast<int64_t>(generated.size()));
  run.max_batch = std::max(run.max_batch, static_cast<int64_t>(generated.size()));
  for (const auto& [id, n] : generated) {
    run.min_context = std::min(run.min_context, input_len + n);
    run.max_context = std::max(run.max_context, input_len + n);
  }
}

Result<BatchRun> run_batch(engine::EngineCore& core, std::vector<std::vector<int32_t>> prompts,
                           const engine::SamplingParams& params) {
  BatchRun run;
  const int64_t input_len = prompts.empty() ? 0 : static_cast<int64_t>(prompts[0].size());
  std::unordered_map<engine::RequestId, int64_t> generated;  // unfinished requests' output counts
  size_t num_started = 0;                                    // requests with a first token
  const Clock::time_point start = Clock::now();
  for (std::vector<int32_t>& p : prompts) {
    run.num_prompt_tokens += static_cast<int64_t>(p.size());
    S4KV_ASSIGN_OR_RETURN(const engine::RequestId id, core.add_request(std::move(p), params));
    generated[id] = 0;
  }
  while (core.has_unfinished()) {
    // With async scheduling the last step() may only drain a step in flight: neither kind.
    const bool draining = generated.empty();
    const bool decode_only = num_started == prompts.size() && !draining;
    if (decode_only) note_decode_step(generated, input_len, run);
    const Clock::time_point step_start = Clock::now();
    const double wait_before = core.model_runner().wait_seconds();
    const std::vector<engine::RequestOutput> outputs = core.step();
    const double step_seconds = seconds_since(step_start);
    const double wait_seconds = core.model_runner().wait_seconds() - wait_before;
    for (const engine::RequestOutput& ro : outputs) {
      auto it = generated.find(ro.request_id);
      S4KV_CHECK(it != generated.end(), "bench: output of an unknown request");
      for (const engine::CompletionOutput& co : ro.outputs) {
        const auto n = static_cast<int64_t>(co.token_ids.size());
        if (it->second == 0 && n > 0) ++num_started;
        it->second += n;
        run.num_output_tokens += n;
      }
      if (ro.finished) generated.erase(it);
    }
    if (decode_only) {
      run.decode_seconds.push_back(step_seconds);
      run.decode_wait_seconds.push_back(wait_seconds);
    } else if (!draining) {
      run.prefill_seconds += step_seconds;
    }
  }
  run.seconds = seconds_since(start);
  return run;
}

Status check_throughput_options(const BenchThroughputOptions& o) {
  S4KV_RETURN_IF_ERROR(check_at_least(o.input_len, 1, "--input-len"));
  S4KV_RETURN_IF_ERROR(check_at_least(o.output_len, 1, "--output-len"));
  return check_at_least(o.num_prompts, 1, "--num-prompts");
}

Status throughput(const BenchThroughputOptions& o, const std::string& command) {
  S4KV_RETURN_IF_ERROR(check_throughput_options(o));
  S4KV_ASSIGN_OR_RETURN(Bench b, load_bench(o.engine, o.input_len, o.output_len));
  engine::EngineCore& core = *b.llm.engine;
  auto prompts = random_prompts(b.pool, o.num_prompts, o.input_len, o.engine.seed);
  S4KV_ASSIGN_OR_RETURN(const BatchRun run,
                        run_batch(core, std::move(prompts), bench_params(o.output_len)));
  const int64_t total = run.num_prompt_tokens + run.num_output_tokens;
  const double s = run.seconds;
  std::printf("Throughput: %.2f requests/s, %.2f total tokens/s, %.2f output tokens/s\n",
              static_cast<double>(o.num_prompts) / s, static_cast<double>(total) / s,
              static_cast<double>(run.num_output_tokens) / s);
  std::printf("Total num prompt tokens:  %lld\n", static_cast<long long>(run.num_prompt_tokens));
  std::printf("Total num output tokens:  %lld\n", static_cast<long long>(run.num_output_tokens));
  std::fflush(stdout);
  if (o.output_json.empty()) return Status::ok();
  OrderedJson j = {{"elapsed_time", s},
                   {"num_requests", o.num_prompts},
                   {"total_num_tokens", total},
                   {"requests_per_second", static_cast<double>(o.num_prompts) / s},
                   {"tokens_per_second", static_cast<double>(total) / s},
                   {"output_tokens_per_second", static_cast<double>(run.num_output_tokens) / s},
                   {"total_num_prompt_tokens", run.num_prompt_tokens},
                   {"total_num_output_tokens", run.num_output_tokens}};
  j.update(settings_json(b, o.engine, command));
  j["input_len"] = o.input_len;
  j["output_len"] = o.output_len;
  j["num_prompts"] = o.num_prompts;
  j["num_preemptions"] = core.scheduler().num_preemptions_total();
  return write_json(o.output_json, j);
}

Status check_latency_options(const BenchLatencyOptions& o) {
  S4KV_RETURN_IF_ERROR(check_at_least(o.input_len, 1, "--input-len"));
  S4KV_RETURN_IF_ERROR(check_at_least(o.output_len, 1, "--output-len"));
  S4KV_RETURN_IF_ERROR(check_at_least(o.batch_size, 1, "--batch-size"));
  S4KV_RETURN_IF_ERROR(check_at_least(o.num_iters_warmup, 0, "--num-iters-warmup"));
  return check_at_least(o.num_iters, 1, "--num-iters");
}

// What the timed iterations add up to.
struct LatencyStats {
  std::vector<double> latencies;        // seconds per iteration
  std::vector<double> prefill_seconds;  // per iteration
  BatchRun decode;                      // every iteration's decode-only steps, ranges merged
};

void merge_decode(const BatchRun& run, BatchRun& into) {
  into.decode_seconds.insert(into.decode_seconds.end(), run.decode_seconds.begin(),
                             run.decode_seconds.end());
  into.decode_wait_seconds.insert(into.decode_wait_seconds.end(), run.decode_wait_seconds.begin(),
                                  run.decode_wait_seconds.end());
  into.min_batch = std::min(into.min_batch, run.min_batch);
  into.max_batch = std::max(into.max_batch, run.max_batch);
  into.min_context = std::min(into.min_context, run.min_context);
  into.max_context = std::max(into.max_context, run.max_context);
}

std::string range(int64_t lo, int64_t hi) {
  return lo == hi ? std::to_string(lo) : std::to_string(lo) + ".." + std::to_string(hi);
}

Result<LatencyStats> time_iterations(const BenchLatencyOptions& o, Bench& b) {
  const int64_t num_runs = o.num_iters_warmup + o.num_iters;
  LatencyStats stats;
  for (int64_t i = 0; i < num_runs; ++i) {
    if (i == 0 && o.num_iters_warmup > 0) std::fprintf(stderr, "INFO warming up\n");
    if (i == o.num_iters_warmup)
      std::fprintf(stderr, "INFO timing %lld iterations\n", static_cast<long long>(o.num_iters));
    // Fresh prompts every iteration (seeded by --seed and the iteration).
    auto prompts = random_prompts(b.pool, o.batch_size, o.input_len,
                                  o.engine.seed * 1000003u + static_cast<uint64_t>(i));
    S4KV_ASSIGN_OR_RETURN(const BatchRun run,
                          run_batch(*b.llm.engine, std::move(prompts), bench_params(o.output_len)));
    if (i < o.num_iters_warmup) continue;
    stats.latencies.push_back(run.seconds);
    stats.prefill_seconds.push_back(run.prefill_seconds);
    merge_decode(run, stats.decode);
  }
  return stats;
}

// The weights-only floor of a decode step: every weight read once at the measured copy
// bandwidth. Unknown (nullopt) where the backend reports either as 0.
struct Floor {
  int64_t weight_bytes = 0;
  double bandwidth = 0.0;  // bytes/s
  std::optional<double> ms, decode_ratio;
};

// Measured after the timed runs, so that its buffers disturb none of them.
Floor measure_floor(backend::Backend& backend, const std::optional<double>& decode_ms) {
  Floor f;
  f.weight_bytes = backend.weight_bytes();
  f.bandwidth = f.weight_bytes > 0 ? backend.measure_copy_bandwidth() : 0.0;
  if (f.weight_bytes > 0 && f.bandwidth > 0.0) {
    f.ms = static_cast<double>(f.weight_bytes) / f.bandwidth * 1e3;
    if (decode_ms) f.decode_ratio = *decode_ms / *f.ms;
  }
  return f;
}

// Each decode step's time outside the backend's wait().
std::vector<double> host_seconds(const BatchRun& d) {
  std::vector<double> host(d.decode_seconds.size());
  for (size_t i = 0; i < host.size(); ++i) host[i] = d.decode_seconds[i] - d.decode_wait_seconds[i];
  return host;
}

void print_decode(const LatencyStats& stats, const std::optional<double>& decode_ms, const Floor& f,
                  bool async_scheduling, bool synchronous) {
  const BatchRun& d = stats.decode;
  if (decode_ms) {
    std::printf("Decode step: median %.3f ms over %zu steps (batch %s, context %s)\n", *decode_ms,
                d.decode_seconds.size(), range(d.min_batch, d.max_batch).c_str(),
                range(d.min_context, d.max_context).c_str());
    std::printf(
        "Decode step host time: median %.3f ms outside the backend's wait (schedule, batch, "
        "submit, detokenize, stop checks), %.3f ms waiting for the device%s\n",
        percentile(host_seconds(d), 50) * 1e3, percentile(d.decode_wait_seconds, 50) * 1e3,
        synchronous        ? " (this backend computes inside submit: its whole step is host time)"
        : async_scheduling ? " (async scheduling: host work overlaps the next step)"
                           : "");
  } else {
    std::printf("Decode step: none (every step was a prefill step)\n");
  }
  if (!f.ms) return;
  std::printf(
      "Weights-only floor: %.3f GB of weights / %.1f GB/s copy bandwidth = %.3f ms per step",
      static_cast<double>(f.weight_bytes) / 1e9, f.bandwidth / 1e9, *f.ms);
  if (f.decode_ratio) std::printf("; decode step = %.2f x the floor", *f.decode_ratio);
  std::printf("\n");
}

OrderedJson latency_json(const LatencyStats& stats, const OrderedJson& percentiles,
                         const std::optional<double>& decode_ms, const Floor& f) {
  const auto or_null = [](const std::optional<double>& v) {
    return v ? OrderedJson(*v) : OrderedJson();
  };
  const BatchRun& d = stats.decode;
  const bool any = !d.decode_seconds.empty();
  return {{"avg_latency", mean(stats.latencies)},
          {"latencies", stats.latencies},
          {"percentiles", percentiles},
          {"decode_step_ms_median", or_null(decode_ms)},
          {"decode_steps", d.decode_seconds.size()},
          {"decode_host_ms_median",
           any ? OrderedJson(percentile(host_seconds(d), 50) * 1e3) : OrderedJson()},
          {"decode_wait_ms_median",
           any ? OrderedJson(percentile(d.decode_wait_seconds, 50) * 1e3) : OrderedJson()},
          {"decode_batch", any ? OrderedJson({d.min_batch, d.max_batch}) : OrderedJson()},
          {"decode_context", any ? OrderedJson({d.min_context, d.max_context}) : OrderedJson()},
          {"prefill_seconds_median", percentile(stats.prefill_seconds, 50)},
          {"weight_bytes", f.weight_bytes},
          {"copy_bandwidth_bytes_per_s", f.bandwidth},
          {"floor_ms", or_null(f.ms)},
          {"decode_over_floor", or_null(f.decode_ratio)}};
}

Status latency(const BenchLatencyOptions& o, const std::string& command) {
  S4KV_RETURN_IF_ERROR(check_latency_options(o));
  S4KV_ASSIGN_OR_RETURN(Bench b, load_bench(o.engine, o.input_len, o.output_len));
  S4KV_ASSIGN_OR_RETURN(const LatencyStats stats, time_iterations(o, b));
  std::printf("Avg latency: %.6f seconds\n", mean(stats.latencies));
  OrderedJson percentiles = OrderedJson::object();
  for (int p : {10, 25, 50, 75, 90, 99}) {
    const double v = percentile(stats.latencies, p);
    std::printf("%d%% percentile latency: %.6f seconds\n", p, v);
    percentiles[std::to_string(p)] = v;
  }
  std::printf(
      "Prefill: median %.3f ms (the steps until every request's first token; batch "
      "%lld, input-len %lld)\n",
      percentile(stats.prefill_seconds, 50) * 1e3, static_cast<long long>(o.batch_size),
      static_cast<long long>(o.input_len));
  std::optional<double> decode_ms;
  if (!stats.decode.decode_seconds.empty()) {
    decode_ms = percentile(stats.decode.decode_seconds, 50) * 1e3;
  }
  const Floor f = measure_floor(b.llm.engine->backend(), decode_ms);
  print_decode(stats, decode_ms, f, b.llm.engine->config().scheduler.async_scheduling,
               b.llm.device != "cuda");
  std::fflush(stdout);
  if (o.output_json.empty()) return Status::ok();
  OrderedJson j = latency_json(stats, percentiles, decode_ms, f);
  j.update(settings_json(b, o.engine, command));
  j["batch_size"] = o.batch_size;
  j["input_len"] = o.input_len;
  j["output_len"] = o.output_len;
  j["num_iters_warmup"] = o.num_iters_warmup;
  j["num_iters"] = o.num_iters;
  return write_json(o.output_json, j);
}

template <typename Fn>
int guarded(const char* name, Fn fn) {
  try {
    const Status s = fn();
    return s.is_ok() ? 0 : fail(s.message());
  } catch (const std::exception& e) {
    return fail(std::string(name) + " failed: " + e.what());
  }
}

void add_shared(CLI::App& sub, EngineFlags& engine, int64_t& input_len, int64_t& output_len,
                std::string& output_json) {
  add_engine_flags(sub, engine, /*model_required=*/true);
  sub.add_option("--input-len", input_len, "prompt tokens per request")->capture_default_str();
  sub.add_option("--output-len", output_len, "tokens generated per request (EOS ignored)")
      ->capture_default_str();
  sub.add_option("--output-json", output_json, "write the figures and the settings here");
}

}  // namespace

int run_bench_throughput(const BenchThroughputOptions& options, const std::string& command) {
  return guarded("bench throughput", [&] { return throughput(options, command); });
}

int run_bench_latency(const BenchLatencyOptions& options, const std::string& command) {
  return guarded("bench latency", [&] { return latency(options, command); });
}

void add_bench_command(CLI::App& app, const std::string& command) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmark the engine offline (vllm bench)");
  bench->require_subcommand(1);

  auto t = std::make_shared<BenchThroughputOptions>();
  CLI::App* ts = bench->add_subcommand(
      "throughput", "Requests and tokens per second of a batch of random prompts, added at once");
  add_shared(*ts, t->engine, t->input_len, t->output_len, t->output_json);
  ts->add_option("--num-prompts", t->num_prompts, "requests")->capture_default_str();
  ts->callback([t, command] { exit_code() = run_bench_throughput(*t, command); });

  auto l = std::make_shared<BenchLatencyOptions>();
  CLI::App* ls = bench->add_subcommand(
      "latency", "Time to complete one batch of random prompts; prefill and decode step times");
  add_shared(*ls, l->engine, l->input_len, l->output_len, l->output_json);
  ls->add_option("--batch-size", l->batch_size, "requests per iteration")->capture_default_str();
  ls->add_option("--num-iters-warmup", l->num_iters_warmup, "untimed iterations first")
      ->capture_default_str();
  ls->add_option("--num-iters", l->num_iters, "timed iterations")->capture_default_str();
  ls->callback([l, command] { exit_code() = run_bench_latency(*l, command); });
}

}  // namespace s4kv::cli
