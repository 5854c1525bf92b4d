#include "cli/eval_command.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
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
  model::ModelConfig config;
  model::ModelWeights weights;
  std::vector<int32_t> tokens;
};

Result<Loaded> load(const EvalOptions& o) {
  S4KV_ASSIGN_OR_RETURN(const std::string dir, model::resolve_model_path(o.model));
  Loaded l;
  S4KV_ASSIGN_OR_RETURN(l.config, model::load_model_config(dir));
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

kv::Int4KiviVariant variant_of(const EvalOptions& o) {
  return {o.int4_sink_blocks, o.int4_value_hadamard};
}

// The tested format in words, e.g. "int4_kivi B64 Gv128 sink1 hadamard".
std::string format_name(kv::KvCacheDtype dtype, const EvalOptions& o) {
  std::string s(kv::kv_cache_dtype_name(dtype));
  if (dtype != kv::KvCacheDtype::kInt4Kivi) return s;
  s += " B" + std::to_string(o.block_size) + " Gv" + std::to_string(o.kivi_group_size);
  if (o.int4_keys_post_rope) s += " post-rope";
  if (o.int4_sink_blocks > 0) s += " sink" + std::to_string(o.int4_sink_blocks);
  if (o.int4_value_hadamard) s += " hadamard";
  return s;
}

engine::BackendFactory factory(const Loaded& l, kv::KvCacheDtype dtype, const EvalOptions& o) {
  return [&l, dtype, &o](int64_t num_tokens) {
    backend::KvCacheConfig kv;
    kv.block_size = o.block_size;
    kv.num_blocks = (num_tokens + o.block_size - 1) / o.block_size;
    kv.dtype = dtype;
    kv.value_group_size = o.kivi_group_size;
    kv.int4_keys_post_rope = o.int4_keys_post_rope;
    kv.num_residual_slots = dtype == kv::KvCacheDtype::kInt4Kivi ? 1 : 0;
    backend::cpu::CpuBackendOptions options;
    if (dtype == kv::KvCacheDtype::kInt4Kivi) options.int4_variant = variant_of(o);
    return backend::cpu::make_cpu_backend(l.config, l.weights, kv, options);
  };
}

Status run(const EvalOptions& o) {
  S4KV_RETURN_IF_ERROR(kv::validate_block_size(o.block_size));
  S4KV_RETURN_IF_ERROR(kv::validate_value_group_size(o.kivi_group_size));
  S4KV_ASSIGN_OR_RETURN(const kv::KvCacheDtype test,
                        parse_dtype(o.kv_cache_dtype, "--kv-cache-dtype"));
  S4KV_ASSIGN_OR_RETURN(const kv::KvCacheDtype ref, parse_dtype(o.reference, "--reference"));
  if (!variant_of(o).is_default() && test != kv::KvCacheDtype::kInt4Kivi) {
    return invalid_argument(
        "eval: --int4-sink-blocks and --int4-value-hadamard need --kv-cache-dtype int4_kivi");
  }
  // The head dim is checked again when the backend is made.
  if (Status s = kv::validate_int4_variant(variant_of(o), 128); !s.is_ok()) return s;
  if (o.bootstrap_resamples < 0) return invalid_argument("eval: --bootstrap-resamples < 0");
  engine::FidelityOptions fo;
  fo.first_token = o.first_token;
  fo.bootstrap_resamples = o.bootstrap_resamples;
  fo.prefix_len = o.prefix_len;
  fo.continuation_len = o.continuation_len;
  fo.num_windows = o.num_windows;
  fo.greedy_len = o.greedy_len;
  S4KV_ASSIGN_OR_RETURN(const Loaded l, load(o));
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
  S4KV_ASSIGN_OR_RETURN(
      const engine::FidelityResult r,
      engine::evaluate_fidelity(l.tokens, fo, factory(l, ref, o), factory(l, test, o)));
  const auto bytes_at = [&](kv::KvCacheDtype d, int64_t context) {
    return kv::kv_bytes_at_context(
        d, context, l.config.num_hidden_layers, l.config.num_key_value_heads, l.config.head_dim,
        o.block_size, o.kivi_group_size,
        d == kv::KvCacheDtype::kInt4Kivi ? variant_of(o) : kv::Int4KiviVariant{});
  };
  const double bytes_per_token =
      kv::kv_bytes_per_token(test, l.config.num_hidden_layers, l.config.num_key_value_heads,
                             l.config.head_dim, o.block_size, o.kivi_group_size);
  const double density_8k =
      bytes_at(kv::KvCacheDtype::k16Bit, kDensityContext) / bytes_at(test, kDensityContext);
  const std::string name = format_name(test, o);
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
  if (!o.json_out.empty()) {
    OrderedJson j = engine::fidelity_to_json(r);
    j["format"] = name;
    j["bytes_per_token"] = bytes_per_token;
    j["bytes_at_8k"] = bytes_at(test, kDensityContext);
    j["density_8k"] = density_8k;
    j["settings"] = {{"model", o.model},
                     {"text", o.text},
                     {"kv_cache_dtype", kv::kv_cache_dtype_name(test)},
                     {"reference", kv::kv_cache_dtype_name(ref)},
                     {"block_size", o.block_size},
                     {"kivi_group_size", o.kivi_group_size},
                     {"int4_keys_post_rope", o.int4_keys_post_rope},
                     {"int4_sink_blocks", o.int4_sink_blocks},
                     {"int4_value_hadamard", o.int4_value_hadamard},
                     {"first_token", o.first_token},
                     {"bootstrap_resamples", o.bootstrap_resamples},
                     {"prefix_len", o.prefix_len},
                     {"continuation_len", o.continuation_len},
                     {"num_windows", o.num_windows},
                     {"greedy_len", o.greedy_len},
                     {"text_tokens", l.tokens.size()}};
    std::ofstream out(o.json_out);
    out << j.dump(1) << "\n";
    if (!out) return io_error(o.json_out + ": cannot write");
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
                  "candidate: keep the first N blocks of every sequence 16-bit (0..4)");
  sub->add_flag("--int4-value-hadamard", options->int4_value_hadamard,
                "candidate: rotate values by a Hadamard transform before quantizing them");
  sub->add_option("--first-token", options->first_token,
                  "token id put first in every window, as a BOS (-1: none)");
  sub->add_option("--bootstrap-resamples", options->bootstrap_resamples,
                  "resamples of windows for the 95% intervals (0: none)");
  sub->add_option("--load-format", options->load_format, "auto or dummy")
      ->check(CLI::IsMember({"auto", "dummy"}));
  sub->add_option("--json", options->json_out, "write every metric and the settings here");
  sub->callback([options] { exit_code() = run_eval(*options); });
}

}  // namespace s4kv::cli
