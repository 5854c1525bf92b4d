#include "cli/check_model.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/command.h"
#include "common/json.h"
#include "model/model_config.h"
#include "model/model_path.h"
#include "model/weights.h"

namespace s4kv::cli {
namespace {

// What the check found. Unknown values stay empty and print as null.
struct Report {
  std::vector<std::string> errors;
  std::optional<std::string> model_path;
  std::optional<model::ModelConfig> config;
  std::optional<std::string> weights;  // "present" | "absent" | "dummy"
  std::optional<int64_t> num_parameters;
};

// Weights: validated when files exist, generated with --load-format dummy, otherwise the
// parameter count comes from the config alone.
void check_weights(const CheckModelOptions& o, const model::ModelConfig& config, Report& r) {
  const bool dummy = o.load_format == "dummy";
  if (!dummy && !model::has_weight_files(*r.model_path)) {
    r.weights = "absent";
    r.num_parameters = model::count_parameters(config);
    return;
  }
  r.weights = dummy ? "dummy" : "present";
  auto weights = model::load_weights(*r.model_path, config,
                                     dummy ? model::LoadFormat::kDummy : model::LoadFormat::kAuto);
  if (!weights.is_ok()) {
    r.errors.push_back(weights.status().message());
    return;
  }
  r.num_parameters = weights->num_parameters();
}

Report check(const CheckModelOptions& o) {
  Report r;
  // Flag values first: they are wrong regardless of the model.
  if (Status s = kv::validate_block_size(o.block_size); !s.is_ok()) r.errors.push_back(s.message());
  if (o.load_format != "auto" && o.load_format != "dummy") {
    r.errors.push_back("unsupported --load-format=" + o.load_format + " (supported: auto, dummy)");
    return r;
  }
  auto path = model::resolve_model_path(o.model);
  if (!path.is_ok()) {
    r.errors.push_back(path.status().message());
    return r;
  }
  r.model_path = *path;
  model::ConfigParse parse = model::read_model_config(*path);
  r.errors.insert(r.errors.end(), parse.errors.begin(), parse.errors.end());
  if (!parse.config) return r;
  r.config = std::move(parse.config);
  check_weights(o, *r.config, r);
  return r;
}

// Keys print in insertion order: the order a reader wants, not alphabetical.

template <typename T>
OrderedJson or_null(const std::optional<T>& v) {
  return v ? OrderedJson(*v) : OrderedJson(nullptr);
}

OrderedJson to_json(const CheckModelOptions& o, const Report& r) {
  const bool block_ok = kv::validate_block_size(o.block_size).is_ok();
  OrderedJson j = OrderedJson::object();
  j["supported"] = r.errors.empty();
  j["errors"] = r.errors;
  j["model"] = o.model;
  j["model_path"] = or_null(r.model_path);
  j["model_type"] = nullptr;
  j["num_hidden_layers"] = nullptr;
  j["num_attention_heads"] = nullptr;
  j["num_key_value_heads"] = nullptr;
  j["head_dim"] = nullptr;
  j["num_parameters"] = or_null(r.num_parameters);
  j["dtype"] = nullptr;
  j["weights"] = or_null(r.weights);
  j["kv_bytes_per_token"] = nullptr;
  j["kv_density"] = nullptr;
  if (const auto& c = r.config) {
    j["model_type"] = c->model_type_name;
    j["num_hidden_layers"] = c->num_hidden_layers;
    j["num_attention_heads"] = c->num_attention_heads;
    j["num_key_value_heads"] = c->num_key_value_heads;
    j["head_dim"] = c->head_dim;
    j["dtype"] = std::string(dtype_torch_name(c->dtype));
    const double b16 = kv::kv_bytes_per_token(kv::KvCacheDtype::k16Bit, c->num_hidden_layers,
                                              c->num_key_value_heads, c->head_dim);
    OrderedJson kv = {{"16bit", static_cast<int64_t>(b16)}, {"int4_kivi", nullptr}};
    if (block_ok) {
      const double b4 = kv::kv_bytes_per_token(kv::KvCacheDtype::kInt4Kivi, c->num_hidden_layers,
                                               c->num_key_value_heads, c->head_dim, o.block_size,
                                               kv::kDefaultValueGroupSize);
      // Whole for head_dim 128 and every allowed layout; printed as an integer when whole.
      kv["int4_kivi"] =
          b4 == std::floor(b4) ? OrderedJson(static_cast<int64_t>(b4)) : OrderedJson(b4);
      j["kv_density"] = std::round(b16 / b4 * 1000.0) / 1000.0;  // 3 decimals: 3.657
    }
    j["kv_bytes_per_token"] = kv;
  }
  j["block_size"] = o.block_size;
  j["value_group_size"] = kv::kDefaultValueGroupSize;
  return j;
}

// Never throws: malformed UTF-8 (from a path, say) is replaced rather than refused.
std::string dump(const OrderedJson& v, int indent) {
  return v.dump(indent, ' ', /*ensure_ascii=*/false, OrderedJson::error_handler_t::replace);
}

// `key: value` lines; strings unquoted, nested objects as `parent.key: value`, errors listed.
void print_text(const OrderedJson& j) {
  for (const auto& [key, value] : j.items()) {
    if (key == "errors") {
      std::printf("errors:%s\n", value.empty() ? " none" : "");
      for (const OrderedJson& e : value) std::printf("  - %s\n", e.get<std::string>().c_str());
    } else if (value.is_object()) {
      for (const auto& [sub, v] : value.items()) {
        std::printf("%s.%s: %s\n", key.c_str(), sub.c_str(), dump(v, -1).c_str());
      }
    } else {
      const std::string text = value.is_string() ? value.get<std::string>() : dump(value, -1);
      std::printf("%s: %s\n", key.c_str(), text.c_str());
    }
  }
}

}  // namespace

int run_check_model(const CheckModelOptions& options) {
  try {
    const Report report = check(options);
    const OrderedJson j = to_json(options, report);
    if (options.json) {
      std::printf("%s\n", dump(j, 2).c_str());
    } else {
      print_text(j);
    }
    std::fflush(stdout);
    if (report.errors.empty()) return 0;
    std::string line = report.errors.front();
    std::replace(line.begin(), line.end(), '\n', ' ');  // exactly one line, whatever a path holds
    std::fprintf(stderr, "error: %s\n", line.c_str());
    return 2;
  } catch (const std::exception& e) {
    // Last resort (allocation failure, a filesystem error): still one line and exit 2.
    std::fprintf(stderr, "error: check-model failed: %s\n", e.what());
    return 2;
  }
}

void add_check_model_command(CLI::App& app) {
  // The callback owns the options: they live as long as the App.
  auto options = std::make_shared<CheckModelOptions>();
  CLI::App* sub = app.add_subcommand(
      "check-model", "Check that S4 KV can serve a model; report shapes and KV bytes per token");
  sub->add_option("--model", options->model,
                  "model directory, or ORG/NAME in the local Hugging Face cache")
      ->required();
  sub->add_flag("--json", options->json, "print the report as one JSON object");
  sub->add_option("--block-size", options->block_size, "KV block size in tokens (32, 64, 128)")
      ->capture_default_str();
  sub->add_option("--load-format", options->load_format,
                  "auto: validate weight files if present; dummy: build random weights")
      ->check(CLI::IsMember({"auto", "dummy"}))
      ->capture_default_str();
  sub->callback([options] { exit_code() = run_check_model(*options); });
}

}  // namespace s4kv::cli
