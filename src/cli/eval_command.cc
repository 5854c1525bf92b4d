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

engine::BackendFactory factory(const Loaded& l, kv::KvCacheDtype dtype, const EvalOptions& o) {
  return [&l, dtype, &o](int64_t num_tokens) {
    backend::KvCacheConfig kv;
    kv.block_size = o.block_size;
    kv.num_blocks = (num_tokens + o.block_size - 1) / o.block_size;
    kv.dtype = dtype;
    kv.value_group_size = o.kivi_group_size;
    kv.int4_keys_post_rope = o.int4_keys_post_rope;
    kv.num_residual_slots = dtype == kv::KvCacheDtype::kInt4Kivi ? 1 : 0;
    return backend::cpu::make_cpu_backend(l.config, l.weights, kv);
  };
}

Status run(const EvalOptions& o) {
  S4KV_RETURN_IF_ERROR(kv::validate_block_size(o.block_size));
  S4KV_RETURN_IF_ERROR(kv::validate_value_group_size(o.kivi_group_size));
  S4KV_ASSIGN_OR_RETURN(const kv::KvCacheDtype test,
                        parse_dtype(o.kv_cache_dtype, "--kv-cache-dtype"));
  S4KV_ASSIGN_OR_RETURN(const kv::KvCacheDtype ref, parse_dtype(o.reference, "--reference"));
  engine::FidelityOptions fo;
  fo.prefix_len = o.prefix_len;
  fo.continuation_len = o.continuation_len;
  fo.num_windows = o.num_windows;
  fo.greedy_len = o.greedy_len;
  S4KV_ASSIGN_OR_RETURN(const Loaded l, load(o));
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
  std::printf(
      "eval %s vs %s: top1 %.4f, confident top1 %.4f (%.1f%% of positions), mean KL %.5f "
      "(max %.4f), ppl %.4f -> %.4f (%+.2f%%), greedy match %.2f, first divergence %.1f\n",
      std::string(kv::kv_cache_dtype_name(test)).c_str(),
      std::string(kv::kv_cache_dtype_name(ref)).c_str(), r.top1_agreement, r.confident_agreement,
      100 * r.confident_fraction, r.mean_kl, r.max_kl, r.ppl_reference, r.ppl_test,
      100 * (r.ppl_test / r.ppl_reference - 1), r.greedy_match_rate, r.mean_first_divergence);
  if (!o.json_out.empty()) {
    OrderedJson j = engine::fidelity_to_json(r);
    j["settings"] = {{"model", o.model},
                     {"text", o.text},
                     {"kv_cache_dtype", kv::kv_cache_dtype_name(test)},
                     {"reference", kv::kv_cache_dtype_name(ref)},
                     {"block_size", o.block_size},
                     {"kivi_group_size", o.kivi_group_size},
                     {"int4_keys_post_rope", o.int4_keys_post_rope},
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
  sub->add_option("--load-format", options->load_format, "auto or dummy")
      ->check(CLI::IsMember({"auto", "dummy"}));
  sub->add_option("--json", options->json_out, "write every metric and the settings here");
  sub->callback([options] { exit_code() = run_eval(*options); });
}

}  // namespace s4kv::cli
