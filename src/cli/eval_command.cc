#include "cli/eval_command.h"

#include <CLI/CLI.hpp>

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "backend/registry.h"
#include "cli/command.h"
#include "common/file.h"
#include "engine/fidelity_eval.h"
#include "kv/kv_format.h"
#include "model/model_config.h"
#include "model/model_path.h"
#include "model/weights.h"
#include "tokenizer/tokenizer.h"

namespace s4kv::cli {
namespace {

constexpr size_t kMaxTextBytes = size_t{256} << 20;

// "auto" and the 16-bit names mean the model's 16-bit cache (as vLLM's --kv-cache-dtype).
Result<kv::KvCacheDtype> parse_dtype(const std::string& name, const char* flag) {
  if (name == "auto" || name == "fp16" || name == "bf16" || name == "16bit") {
    return kv::KvCacheDtype::k16Bit;
  }
  if (name == "int4_kivi") return kv::KvCacheDtype::kInt4Kivi;
  if (name == "fp8_e4m3" || name == "fp8") return kv::KvCacheDtype::kFp8E4M3;
  return unsupported(std::string("unsupported ") + flag + "=" + name +
                     " (supported: auto, fp16, bf16, fp8_e4m3, int4_kivi)");
}

struct Loaded {
  std::string device;  // resolved --device
  int cpu_threads = 0;
  DType compute_dtype = DType::kF32;
  model::ModelConfig config;
  model::ModelWeights weights;
  std::vector<int32_t> tokens;
};

Result<Loaded> load(const EvalOptions& o) {
  S4KV_ASSIGN_OR_RETURN(const std::string dir, model::resolve_model_path(o.model));
  Loaded l;
  l.cpu_threads = o.cpu_threads;
  S4KV_ASSIGN_OR_RETURN(l.config, model::load_model_config(dir));
  S4KV_ASSIGN_OR_RETURN(l.device, backend::resolve_device(o.device));
  S4KV_ASSIGN_OR_RETURN(l.compute_dtype, backend::resolve_dtype(o.dtype, l.device, l.config));
  const auto format =
      o.load_format == "dummy" ? model::LoadFormat::kDummy : model::LoadFormat::kAuto;
  S4KV_ASSIGN_OR_RETURN(l.weights, model::load_weights(dir, l.config, format));
  S4KV_ASSIGN_OR_RETURN(const tokenizer::Tokenizer tok,
                        tokenizer::Tokenizer::from_file(dir + "/tokenizer.json"));
  S4KV_ASSIGN_OR_RETURN(const std::string text, read_file(o.text, kMaxTextBytes));
  S4KV_ASSIGN_OR_RETURN(l.tokens, tok.encode(text, /*add_special_tokens=*/false));
  return l;
}

constexpr int64_t kDensityContext = 8192;

// One KV format under test: the dtype and, for int4_kivi, its layout and candidate variant.
struct Format {
  kv::KvCacheDtype dtype = kv::KvCacheDtype::kInt4Kivi;
  int block_size = 64;
  int group_size = 128;
  bool post_rope = false;
  kv::Int4KiviVariant variant;
};

// The canonical name, which --candidates parses back: 16bit, fp8_e4m3, or
// int4_b<B>_gv<Gv>[_sink<N>][_had][_post_rope].
std::string format_name(const Format& f) {
  if (f.dtype != kv::KvCacheDtype::kInt4Kivi) return std::string(kv::kv_cache_dtype_name(f.dtype));
  std::string s = "int4_b" + std::to_string(f.block_size) + "_gv" + std::to_string(f.group_size);
  if (f.variant.sink_blocks > 0) s += "_sink" + std::to_string(f.variant.sink_blocks);
  if (f.variant.window_blocks > 0) s += "_win" + std::to_string(f.variant.window_blocks);
  if (f.variant.value_hadamard) s += "_had";
  if (f.post_rope) s += "_post_rope";
  return s;
}

Result<Format> format_from_flags(const EvalOptions& o) {
  Format f;
  S4KV_ASSIGN_OR_RETURN(f.dtype, parse_dtype(o.kv_cache_dtype, "--kv-cache-dtype"));
  f.block_size = o.block_size;
  f.group_size = o.kivi_group_size;
  f.post_rope = o.int4_keys_post_rope;
  if (o.int4_value_hadamard != 0 && o.int4_value_hadamard != 1) {
    return invalid_argument("eval: --int4-value-hadamard must be 0 or 1");
  }
  f.variant = {o.int4_sink_blocks, o.int4_window_blocks, o.int4_value_hadamard != 0};
  if (f.dtype != kv::KvCacheDtype::kInt4Kivi) {
    if (f.post_rope || !f.variant.is_default()) {
      return invalid_argument(
          "eval: --int4-keys-post-rope, --int4-sink-blocks and --int4-value-hadamard need "
          "--kv-cache-dtype int4_kivi");
    }
    f.variant = {0, 0, false};
  }
  return f;
}

// A --candidates name: a dtype name, or int4 with optional _b<B>, _gv<Gv>, _sink<N>, _had and
// _post_rope parts in that order (defaults B64 Gv128).
Result<Format> parse_candidate(const std::string& name) {
  const Status bad = invalid_argument(
      "eval: --candidates: cannot parse '" + name +
      "' (16bit, fp8_e4m3, or int4[_b<B>][_gv<Gv>][_sink<N>][_win<N>][_had][_post_rope])");
  Format f;
  if (name == "int4_kivi") return f;  // the serving format
  f.variant = {0, 0, false};          // a name spells out every part: int4_b64_gv128 is format v1
  if (name.rfind("int4", 0) != 0) {
    auto dtype = parse_dtype(name, "--candidates");
    if (!dtype.is_ok()) return dtype.status();
    f.dtype = *dtype;
    return f;
  }
  std::string rest = name.substr(4);
  const auto take_number = [&rest](const std::string& prefix, int* out) {
    if (rest.rfind(prefix, 0) != 0) return true;  // absent: keep the default
    size_t i = prefix.size();
    if (i >= rest.size() || !std::isdigit(static_cast<unsigned char>(rest[i]))) return false;
    int v = 0;
    while (i < rest.size() && std::isdigit(static_cast<unsigned char>(rest[i])) && v < 100000) {
      v = v * 10 + (rest[i++] - '0');
    }
    *out = v;
    rest = rest.substr(i);
    return true;
  };
  const auto take_word = [&rest](const std::string& word) {
    if (rest.rfind(word, 0) != 0) return false;
    rest = rest.substr(word.size());
    return true;
  };
  if (!take_number("_b", &f.block_size) || !take_number("_gv", &f.group_size) ||
      !take_number("_sink", &f.variant.sink_blocks) ||
      !take_number("_win", &f.variant.window_blocks)) {
    return bad;
  }
  f.variant.value_hadamard = take_word("_had");
  f.post_rope = take_word("_post_rope");
  if (!rest.empty()) return bad;
  return f;
}

// Layout and variant against the model's head dim (after loading: the model is small next to
// an evaluation, so a bad format is still refused within a second).
Status validate(const Format& f, const model::ModelConfig& config) {
  if (f.dtype != kv::KvCacheDtype::kInt4Kivi) return Status::ok();
  S4KV_RETURN_IF_ERROR(kv::validate_block_size(f.block_size));
  S4KV_RETURN_IF_ERROR(kv::validate_value_group_size(f.group_size));
  return kv::validate_int4_variant(f.variant, config.head_dim);
}

engine::BackendFactory factory(const Loaded& l, const Format& f) {
  return [&l, f](int64_t num_tokens) {
    backend::KvCacheConfig kv;
    kv.block_size = f.block_size;
    kv.num_blocks = (num_tokens + f.block_size - 1) / f.block_size;
    kv.dtype = f.dtype;
    kv.value_group_size = f.group_size;
    kv.int4_keys_post_rope = f.post_rope;
    kv.num_seats = f.dtype == kv::KvCacheDtype::kInt4Kivi ? 1 : 0;
    if (f.dtype == kv::KvCacheDtype::kInt4Kivi) {
      kv.num_sink_blocks = f.variant.sink_blocks;  // one sequence: one sink block at most
      kv.num_window_blocks = f.variant.window_blocks;
      kv.int4_value_hadamard = f.variant.value_hadamard;
    }
    // One sequence of num_tokens tokens, prefilled in one step.
    const backend::BackendLimits limits{num_tokens, 1, num_tokens};
    return backend::make_started_backend(l.device, l.compute_dtype, l.config, l.weights, kv, limits,
                                         backend::DeviceOptions{.cpu_threads = l.cpu_threads});
  };
}

// Prints the summary line and writes the JSON report of one tested format.
Status report(const EvalOptions& o, const Loaded& l, kv::KvCacheDtype ref, const Format& f,
              const engine::FidelityResult& r, const std::string& json_path) {
  const auto bytes_at = [&](const Format& g, int64_t context) {
    return kv::kv_bytes_at_context(g.dtype, context, l.config.num_hidden_layers,
                                   l.config.num_key_value_heads, l.config.head_dim, g.block_size,
                                   g.group_size, g.variant);
  };
  const double bytes_per_token =
      kv::kv_bytes_per_token(f.dtype, l.config.num_hidden_layers, l.config.num_key_value_heads,
                             l.config.head_dim, f.block_size, f.group_size);
  const double density_8k = bytes_at(Format{.dtype = kv::KvCacheDtype::k16Bit}, kDensityContext) /
                            bytes_at(f, kDensityContext);
  const std::string name = format_name(f);
  std::printf(
      "eval %s vs %s: density@8k %.2fx, top1 %.4f, confident top1 %.4f (%.1f%% of positions), "
      "mean KL %.5f [%.5f, %.5f], p99 KL %.4f [%.4f, %.4f], max KL %.4f [%.4f, %.4f] (2nd "
      "%.4f, window maxima %.4f..%.4f), ppl %.4f -> %.4f (%+.2f%% [%+.2f, %+.2f]), greedy match "
      "%.2f, first divergence %.1f\n",
      name.c_str(), std::string(kv::kv_cache_dtype_name(ref)).c_str(), density_8k, r.top1_agreement,
      r.confident_agreement, 100 * r.confident_fraction, r.mean_kl, r.mean_kl_ci.lo,
      r.mean_kl_ci.hi, r.p99_kl, r.p99_kl_ci.lo, r.p99_kl_ci.hi, r.max_kl, r.max_kl_ci.lo,
      r.max_kl_ci.hi, r.second_max_kl, r.window_max_kl_min, r.max_kl, r.ppl_reference, r.ppl_test,
      100 * (r.ppl_test / r.ppl_reference - 1), 100 * r.ppl_change_ci.lo, 100 * r.ppl_change_ci.hi,
      r.greedy_match_rate, r.mean_first_divergence);
  std::fflush(stdout);
  if (json_path.empty()) return Status::ok();
  OrderedJson j = engine::fidelity_to_json(r);
  j["format"] = name;
  j["bytes_per_token"] = bytes_per_token;
  j["bytes_at_8k"] = bytes_at(f, kDensityContext);
  j["density_8k"] = density_8k;
  j["settings"] = {{"model", o.model},
                   {"text", o.text},
                   {"kv_cache_dtype", kv::kv_cache_dtype_name(f.dtype)},
                   {"reference", kv::kv_cache_dtype_name(ref)},
                   {"block_size", f.block_size},
                   {"kivi_group_size", f.group_size},
                   {"int4_keys_post_rope", f.post_rope},
                   {"int4_sink_blocks", f.variant.sink_blocks},
                   {"int4_window_blocks", f.variant.window_blocks},
                   {"int4_value_hadamard", f.variant.value_hadamard},
                   {"first_token", o.first_token},
                   {"bootstrap_resamples", o.bootstrap_resamples},
                   {"prefix_len", o.prefix_len},
                   {"continuation_len", o.continuation_len},
                   {"num_windows", o.num_windows},
                   {"greedy_len", o.greedy_len},
                   {"text_tokens", l.tokens.size()}};
  std::ofstream out(json_path);
  out << j.dump(1) << "\n";
  if (!out) return io_error(json_path + ": cannot write");
  return Status::ok();
}

Status run(const EvalOptions& o) {
  std::vector<Format> formats;
  if (o.candidates.empty()) {
    S4KV_ASSIGN_OR_RETURN(Format f, format_from_flags(o));
    formats.push_back(f);
  } else {
    if (!o.json_out.empty())
      return invalid_argument("eval: --candidates writes --json-dir, not --json");
    for (const std::string& name : o.candidates) {
      S4KV_ASSIGN_OR_RETURN(Format f, parse_candidate(name));
      formats.push_back(f);
    }
  }
  S4KV_ASSIGN_OR_RETURN(const kv::KvCacheDtype ref, parse_dtype(o.reference, "--reference"));
  // The reference's blocks: the flags' block size (a 16-bit cache's values do not depend on it).
  const Format ref_format{.dtype = ref, .block_size = o.block_size};
  S4KV_RETURN_IF_ERROR(kv::validate_block_size(o.block_size));
  if (o.bootstrap_resamples < 0) return invalid_argument("eval: --bootstrap-resamples < 0");
  engine::FidelityOptions fo;
  fo.first_token = o.first_token;
  fo.bootstrap_resamples = o.bootstrap_resamples;
  fo.prefix_len = o.prefix_len;
  fo.continuation_len = o.continuation_len;
  fo.num_windows = o.num_windows;
  fo.greedy_len = o.greedy_len;
  S4KV_ASSIGN_OR_RETURN(const Loaded l, load(o));
  for (const Format& f : formats) S4KV_RETURN_IF_ERROR(validate(f, l.config));
  if (o.first_token >= l.config.vocab_size) {
    return invalid_argument("eval: --first-token " + std::to_string(o.first_token) +
                            " outside the vocabulary");
  }
  if (o.prefix_len + std::max(o.continuation_len, o.greedy_len) >
      l.config.max_position_embeddings) {
    return invalid_argument(
        "eval: --prefix-len + --continuation-len exceeds the model's "
        "max_position_embeddings=" +
        std::to_string(l.config.max_position_embeddings));
  }
  if (!o.json_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.json_dir, ec);
    if (ec) return io_error(o.json_dir + ": cannot create: " + ec.message());
  }
  std::vector<engine::BackendFactory> tests;
  for (const Format& f : formats) tests.push_back(factory(l, f));
  S4KV_ASSIGN_OR_RETURN(const std::vector<engine::FidelityResult> results,
                        engine::evaluate_fidelity(l.tokens, fo, factory(l, ref_format), tests));
  for (size_t i = 0; i < formats.size(); ++i) {
    const std::string json =
        !o.json_dir.empty() ? o.json_dir + "/" + format_name(formats[i]) + ".json" : o.json_out;
    S4KV_RETURN_IF_ERROR(report(o, l, ref, formats[i], results[i], json));
  }
  return Status::ok();
}

}  // namespace

int run_eval(const EvalOptions& options) {
  const Status s = run(options);
  if (s.is_ok()) return 0;
  std::fprintf(stderr, "error: %s\n", s.message().c_str());
  return 2;
}

void add_eval_command(CLI::App& app) {
  auto options = std::make_shared<EvalOptions>();
  CLI::App* sub = app.add_subcommand(
      "eval", "measure a KV cache format's fidelity against the 16-bit cache (two-pass method)");
  sub->add_option("--model", options->model, "model directory or ORG/NAME")->required();
  sub->add_option("--text", options->text, "UTF-8 text file to evaluate on")->required();
  sub->add_option("--kv-cache-dtype", options->kv_cache_dtype,
                  "tested KV format: int4_kivi (default), fp8_e4m3, auto");
  sub->add_option("--reference", options->reference, "reference KV format (default auto: 16-bit)");
  sub->add_option("--prefix-len", options->prefix_len, "tokens prefilled into the cache");
  sub->add_option("--continuation-len", options->continuation_len,
                  "tokens teacher-forced one per step after the prefix");
  sub->add_option("--num-windows", options->num_windows, "windows spread over the text");
  sub->add_option("--greedy-len", options->greedy_len, "greedy tokens generated per prefix");
  sub->add_option("--block-size", options->block_size, "KV block size (32, 64, 128)");
  sub->add_option("--kivi-group-size", options->kivi_group_size,
                  "int4_kivi value group Gv (32, 64, 128)");
  sub->add_flag("--int4-keys-post-rope", options->int4_keys_post_rope,
                "quantize int4 keys after RoPE, as the KIVI paper does (for comparison only)");
  sub->add_option("--int4-sink-blocks", options->int4_sink_blocks,
                  "int4_kivi: keep the first block of every sequence 16-bit (1: format v2, the "
                  "default; 0: v1, for comparison)");
  sub->add_option("--int4-window-blocks", options->int4_window_blocks,
                  "int4_kivi: keep the last full block 16-bit too (1: v2, the default; 0: v1)");
  sub->add_option("--int4-value-hadamard", options->int4_value_hadamard,
                  "int4_kivi: rotate values by a Hadamard transform before quantizing them (1: "
                  "v2, the default; 0: v1)");
  sub->add_option("--first-token", options->first_token,
                  "token id put first in every window, as a BOS (-1: none)");
  sub->add_option("--bootstrap-resamples", options->bootstrap_resamples,
                  "resamples of windows for the 95% intervals (0: none)");
  sub->add_option("--cpu-threads", options->cpu_threads,
                  "threads of the CPU forward pass; 0: the cores available")
      ->check(CLI::Range(0, 1024));
  sub->add_option("--device", options->device, "auto = cuda when a GPU is visible, else cpu")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  sub->add_option("--dtype", options->dtype, "compute dtype (as serve's --dtype)")
      ->check(CLI::IsMember({"auto", "bfloat16", "float16", "half", "float32", "float"}))
      ->capture_default_str();
  sub->add_option("--load-format", options->load_format, "auto or dummy")
      ->check(CLI::IsMember({"auto", "dummy"}));
  sub->add_option("--candidates", options->candidates,
                  "evaluate these formats against one shared reference pass, comma-separated: "
                  "16bit, fp8_e4m3, int4[_b<B>][_gv<Gv>][_sink<N>][_win<N>][_had][_post_rope]")
      ->delimiter(',');
  sub->add_option("--json", options->json_out, "write every metric and the settings here");
  sub->add_option("--json-dir", options->json_dir,
                  "write each tested format's report to DIR/<format name>.json");
  sub->callback([options] { exit_code() = run_eval(*options); });
}

}  // namespace s4kv::cli
