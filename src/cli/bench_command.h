// `s4kv bench throughput` and `s4kv bench latency`: the engine run offline in this process (no
// server) on random prompts, with `vllm bench throughput` / `vllm bench latency`'s flags and
// printed lines, on any --device (every engine flag of engine_flags.h applies, --load-format
// dummy included). Every request samples with temperature 1 and top_p 1 and ignores EOS, so it
// generates exactly --output-len tokens.
//
// throughput: --num-prompts prompts of --input-len ids are added at once and the engine is
// stepped until every one has finished; the time covers the adds and the steps. Prints
//   Throughput: X requests/s, Y total tokens/s, Z output tokens/s
//   Total num prompt tokens:  N
//   Total num output tokens:  M
// latency: --num-iters-warmup then --num-iters iterations of --batch-size prompts, each added at
// once and stepped to completion (fresh prompts every iteration, so the prefix cache never
// hits). Prints the mean and the 10/25/50/75/90/99th percentiles of the iterations' times, and
// from the engine steps timed one by one: the median prefill (the steps until every request's
// first token), the median decode-only step (the steps after that) with its batch and context
// lengths, and, where the backend reports its weights' bytes and a measured copy bandwidth, the
// weights-only floor of a decode step (every weight read once) and the decode step's ratio to it.
//
// --output-json FILE writes the figures and the settings:
//   throughput: elapsed_time, num_requests, total_num_tokens, requests_per_second,
//     tokens_per_second, output_tokens_per_second (vLLM's), total_num_prompt_tokens,
//     total_num_output_tokens, then the settings below, input_len, output_len, num_prompts and
//     num_preemptions;
//   latency: avg_latency, latencies, percentiles {"10", ..., "99"} (vLLM's; seconds),
//     decode_step_ms_median, decode_steps, decode_batch and decode_context ([min, max]),
//     prefill_seconds_median, weight_bytes, copy_bandwidth_bytes_per_s, floor_ms,
//     decode_over_floor (null where unknown), then the settings below, batch_size, input_len,
//     output_len, num_iters_warmup and num_iters;
//   settings: command (argv joined), device ("cpu", or "cuda: " and the GPU when the capacity
//     line names it), kv_cache_dtype (resolved: "16bit", "fp8_e4m3", "int4_kivi"), model (as
//     given), max_model_len, max_num_seqs and max_num_batched_tokens (resolved).
// A refusal (a length or count below 1, --input-len + --output-len over max_model_len, any engine
// flag the engine refuses) exits 2 with one `error: ...` line on stderr and nothing on stdout.
#pragma once

#include <cstdint>
#include <string>

#include "cli/engine_flags.h"

namespace CLI {
class App;
}  // namespace CLI

namespace s4kv::cli {

struct BenchThroughputOptions {
  EngineFlags engine;
  int64_t input_len = 1024;
  int64_t output_len = 128;
  int64_t num_prompts = 1000;
  std::string output_json;
};

struct BenchLatencyOptions {
  EngineFlags engine;
  int64_t input_len = 32;
  int64_t output_len = 128;
  int64_t batch_size = 8;
  int64_t num_iters_warmup = 10;
  int64_t num_iters = 30;
  std::string output_json;
};

// Run the commands; return the exit code (0 or 2). Never throw. `command` is the command line,
// recorded in the JSON.
int run_bench_throughput(const BenchThroughputOptions& options, const std::string& command);
int run_bench_latency(const BenchLatencyOptions& options, const std::string& command);

// Registers `bench` with its two subcommands; `command` is the command line (argv joined).
void add_bench_command(CLI::App& app, const std::string& command);

}  // namespace s4kv::cli
