#include "cli/engine_flags.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <cstdio>

namespace s4kv::cli {

int fail(const std::string& message) {
  std::string line = message;
  std::replace(line.begin(), line.end(), '\n', ' ');
  std::fprintf(stderr, "error: %s\n", line.c_str());
  return 2;
}

Result<int64_t> parse_bytes(const std::string& text, const std::string& flag) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  const std::string unit = text.substr(digits);
  int shift = -1;
  if (unit.empty() || unit == "B") shift = 0;
  if (unit == "K" || unit == "KiB") shift = 10;
  if (unit == "M" || unit == "MiB") shift = 20;
  if (unit == "G" || unit == "GiB") shift = 30;
  if (digits == 0 || digits > 12 || shift < 0) {
    return invalid_argument(flag + "=" + text +
                            ": expected bytes, optionally with K, M, G, KiB, MiB or GiB");
  }
  return std::stoll(text.substr(0, digits)) << shift;
}

Result<engine::EngineArgs> engine_args(const EngineFlags& f) {
  engine::EngineArgs a;
  a.model = f.model;
  a.device = f.device;
  a.dtype = f.dtype;
  a.load_format = f.load_format == "dummy" ? model::LoadFormat::kDummy : model::LoadFormat::kAuto;
  engine::EngineConfig& c = a.config;
  S4KV_ASSIGN_OR_RETURN(c.kv_cache_dtype, engine::parse_kv_cache_dtype(f.kv_cache_dtype));
  if (f.kv_cache_memory == "auto") {
    c.kv_cache_memory_bytes = 0;
  } else {
    S4KV_ASSIGN_OR_RETURN(c.kv_cache_memory_bytes,
                          parse_bytes(f.kv_cache_memory, "--kv-cache-memory"));
  }
  if (!(f.gpu_memory_utilization > 0.0 && f.gpu_memory_utilization <= 1.0)) {
    return invalid_argument("--gpu-memory-utilization must be in (0, 1]");
  }
  c.gpu_memory_utilization = f.gpu_memory_utilization;
  if (f.cpu_threads < 0 || f.cpu_threads > 1024) {
    return invalid_argument("--cpu-threads=" + std::to_string(f.cpu_threads) +
                            " (0: the cores available, or 1..1024)");
  }
  c.cpu_threads = f.cpu_threads;
  c.enforce_eager = f.enforce_eager;
  c.async_scheduling = f.async_scheduling;
  c.max_model_len = f.max_model_len;
  c.max_num_seqs = f.max_num_seqs;
  c.max_num_batched_tokens = f.max_num_batched_tokens;
  c.block_size = f.block_size;
  c.enable_prefix_caching = f.enable_prefix_caching;
  c.seed = f.seed;
  return a;
}

void add_engine_flags(CLI::App& sub, EngineFlags& f, bool model_required) {
  CLI::Option* model =
      sub.add_option("--model", f.model, "model directory, or ORG/NAME in the local HF cache");
  if (model_required) model->required();
  sub.add_option("--chat-template", f.chat_template, "Jinja file overriding the model's template");
  sub.add_option("--seed", f.seed, "seed of the engine's RNG")->capture_default_str();
  sub.add_option("--kv-cache-dtype", f.kv_cache_dtype, "auto = the model's 16-bit dtype")
      ->check(CLI::IsMember({"auto", "fp16", "bf16", "fp8_e4m3", "int4_kivi"}))
      ->capture_default_str();
  sub.add_option("--max-model-len", f.max_model_len, "0: min(model, KV cache)");
  sub.add_option("--max-num-seqs", f.max_num_seqs, "0: 64 on CPU");
  sub.add_option("--max-num-batched-tokens", f.max_num_batched_tokens,
                 "tokens per step; 0: 2048 on cpu; on cuda vLLM's defaults, 8192 for serve and "
                 "16384 for generate / bench on GPUs of >= 70 GiB, else 2048 / 8192")
      ->capture_default_str();
  sub.add_option("--block-size", f.block_size, "KV block size (32, 64, 128)")
      ->capture_default_str();
  sub.add_option("--kv-cache-memory", f.kv_cache_memory,
                 "KV cache bytes (e.g. 512MiB); auto: 1GiB on cpu, the share of "
                 "--gpu-memory-utilization left on cuda")
      ->capture_default_str();
  sub.add_option("--gpu-memory-utilization", f.gpu_memory_utilization,
                 "share of the GPU's memory for weights, activations and the KV cache (cuda)")
      ->capture_default_str();
  sub.add_option("--cpu-threads", f.cpu_threads,
                 "threads of the CPU forward pass (GEMMs and attention share them); 0: the cores "
                 "available")
      ->capture_default_str();
  sub.add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", f.enable_prefix_caching,
               "reuse cached KV blocks of shared prompt prefixes (default on)");
  sub.add_option("--load-format", f.load_format, "auto | dummy")
      ->check(CLI::IsMember({"auto", "dummy"}))
      ->capture_default_str();
  sub.add_option("--device", f.device, "auto = cuda when a GPU is visible, else cpu")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  sub.add_option("--dtype", f.dtype,
                 "compute dtype; auto = the checkpoint's (bf16 for fp32 checkpoints on cuda)")
      ->check(CLI::IsMember({"auto", "bfloat16", "float16", "half", "float32", "float"}))
      ->capture_default_str();
  sub.add_flag("--enforce-eager", f.enforce_eager,
               "run every step eagerly: no CUDA graphs (cuda; decode steps replay them otherwise)");
  sub.add_flag("--async-scheduling", f.async_scheduling,
               "schedule and submit step N+1 before waiting for step N, so that scheduling, "
               "detokenization and stop checks overlap the device (default off)");
}

}  // namespace s4kv::cli
