// config.json validation. Every check records its problem and carries on, so one run lists
// everything wrong with a config; checks run in a fixed order (model type first) so the first
// message, the one start-up prints, names the most fundamental problem. Integers must be JSON
// integers within bounds that keep later size arithmetic (bytes of a tensor, of the KV cache)
// far from int64 overflow.
#include "model/model_config.h"

#include <cmath>
#include <limits>
#include <utility>

#include "common/file.h"

namespace s4kv::model {
namespace {

constexpr int64_t kSupportedHeadDim = 128;
constexpr int64_t kMaxPositions = int64_t{1} << 24;  // 16M tokens

// Collects errors in order; the first one's code becomes the parse's code.
class Checker {
 public:
  explicit Checker(std::string source) : source_(std::move(source)) {}

  void unsupported(const std::string& field, const std::string& value,
                   const std::string& supported) {
    add(StatusCode::kUnsupported,
        "unsupported model: " + field + "=" + value + " (supported: " + supported + ")");
  }
  void invalid(const std::string& what) {
    add(StatusCode::kInvalidArgument, "invalid model config " + source_ + ": " + what);
  }
  void missing(const std::string& field) { invalid(field + ": missing"); }
  void wrong_type(const std::string& field, const char* expected, const Json& v) {
    std::string found(json_type_name(v));
    if (!v.is_null()) found += " " + json_brief(v);
    invalid(field + ": expected " + expected + ", found " + found);
  }

  // An integer in [lo, hi]; nullopt (with an error unless absent and optional) otherwise.
  // JSON null counts as absent.
  std::optional<int64_t> integer(const Json& obj, const std::string& key, const std::string& field,
                                 int64_t lo, int64_t hi, bool required) {
    const Json* v = find(obj, key);
    if (v == nullptr) {
      if (required) missing(field);
      return std::nullopt;
    }
    if (!v->is_number_integer() && !v->is_number_unsigned()) {
      wrong_type(field, "integer", *v);
      return std::nullopt;
    }
    // Unsigned values above int64's range are out of range by definition.
    const bool fits = !v->is_number_unsigned() ||
                      v->get<uint64_t>() <= uint64_t{std::numeric_limits<int64_t>::max()};
    const int64_t x = fits ? v->get<int64_t>() : hi;
    if (!fits || x < lo || x > hi) {
      invalid(field + "=" + json_brief(*v) + " out of range (" + std::to_string(lo) + ".." +
              std::to_string(hi) + ")");
      return std::nullopt;
    }
    return x;
  }

  // A finite number (integer or float) with value > lo (or >= lo when inclusive).
  std::optional<double> number(const Json& obj, const std::string& key, const std::string& field,
                               double lo, bool inclusive, bool required) {
    const Json* v = find(obj, key);
    if (v == nullptr) {
      if (required) missing(field);
      return std::nullopt;
    }
    if (!v->is_number()) {
      wrong_type(field, "number", *v);
      return std::nullopt;
    }
    const double x = v->get<double>();
    if (!std::isfinite(x) || x < lo || (!inclusive && x == lo)) {
      invalid(field + "=" + json_brief(*v) + " out of range (" + (inclusive ? ">= " : "> ") +
              json_brief(Json(lo)) + ")");
      return std::nullopt;
    }
    return x;
  }

  std::optional<bool> boolean(const Json& obj, const std::string& key) {
    const Json* v = find(obj, key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_boolean()) {
      wrong_type(key, "boolean", *v);
      return std::nullopt;
    }
    return v->get<bool>();
  }

  std::optional<std::string> string(const Json& obj, const std::string& key,
                                    const std::string& field, bool required) {
    const Json* v = find(obj, key);
    if (v == nullptr) {
      if (required) missing(field);
      return std::nullopt;
    }
    if (!v->is_string()) {
      wrong_type(field, "string", *v);
      return std::nullopt;
    }
    return v->get<std::string>();
  }

  // The value of key, or nullptr when absent or null.
  static const Json* find(const Json& obj, const std::string& key) {
    auto it = obj.find(key);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
  }

  bool ok() const { return errors_.empty(); }
  ConfigParse finish(std::optional<ModelConfig> config) && {
    ConfigParse out;
    if (errors_.empty()) out.config = std::move(config);
    out.errors = std::move(errors_);
    out.code = code_;
    return out;
  }

 private:
  void add(StatusCode code, std::string message) {
    if (errors_.empty()) code_ = code;
    errors_.push_back(std::move(message));
  }

  std::string source_;
  std::vector<std::string> errors_;
  StatusCode code_ = StatusCode::kOk;
};

std::string json_quoted(const std::string& s) { return json_brief(Json(s)); }

// The architectures entry transformers writes for each supported model_type.
struct KnownType {
  const char* model_type;
  ModelType type;
  const char* architecture;
};
constexpr KnownType kKnownTypes[] = {{"qwen2", ModelType::kQwen2, "Qwen2ForCausalLM"},
                                     {"llama", ModelType::kLlama, "LlamaForCausalLM"}};

// model_type and architectures. Returns the known type, or nullptr when it is not served.
const KnownType* check_model_type(Checker& c, const Json& doc, ModelConfig& cfg) {
  auto name = c.string(doc, "model_type", "model_type", /*required=*/true);
  const KnownType* known = nullptr;
  for (const KnownType& k : kKnownTypes) {
    if (name == k.model_type) known = &k;
  }
  if (known != nullptr) {
    cfg.model_type = known->type;
    cfg.model_type_name = known->model_type;
  } else if (name) {
    c.unsupported("model_type", json_quoted(*name), "\"qwen2\", \"llama\"");
  }
  const Json* arch = Checker::find(doc, "architectures");
  if (arch == nullptr) return known;
  if (!arch->is_array() || arch->empty()) {
    c.wrong_type("architectures", "non-empty list of strings", *arch);
    return known;
  }
  // Every entry must be the class of the model type (or of some supported type, when the
  // model type itself is unknown): another class means other code would run the weights.
  auto matches = [known](const Json& a) {
    for (const KnownType& k : kKnownTypes) {
      if ((known == nullptr || known == &k) && a == k.architecture) return true;
    }
    return false;
  };
  for (const Json& a : *arch) {
    if (matches(a)) continue;
    c.unsupported("architectures", json_brief(*arch),
                  known == nullptr ? "\"Qwen2ForCausalLM\", \"LlamaForCausalLM\""
                                   : json_quoted(known->architecture) + " for model_type " +
                                         json_quoted(known->model_type));
    break;
  }
  return known;
}

void check_dtype_and_quantization(Checker& c, const Json& doc, ModelConfig& cfg) {
  if (const Json* q = Checker::find(doc, "quantization_config")) {
    const Json* method = q->is_object() ? Checker::find(*q, "quant_method") : nullptr;
    if (method != nullptr) {
      c.unsupported("quantization_config.quant_method", json_brief(*method),
                    "none; quantized checkpoints are not served");
    } else {
      c.unsupported("quantization_config", json_brief(*q), "none");
    }
  }
  // Newer transformers write "dtype", older "torch_dtype".
  const std::string key =
      doc.contains("dtype") && !doc.contains("torch_dtype") ? "dtype" : "torch_dtype";
  auto name = c.string(doc, key, key, /*required=*/true);
  if (!name) return;
  auto dtype = dtype_from_torch_name(*name);
  if (dtype) {
    cfg.dtype = *dtype;
  } else {
    c.unsupported(key, json_quoted(*name), "\"bfloat16\", \"float16\", \"float32\"");
  }
}

void check_dimensions(Checker& c, const Json& doc, ModelConfig& cfg) {
  auto hidden = c.integer(doc, "hidden_size", "hidden_size", 1, 65536, true);
  auto inter = c.integer(doc, "intermediate_size", "intermediate_size", 1, 1 << 20, true);
  auto layers = c.integer(doc, "num_hidden_layers", "num_hidden_layers", 1, 1024, true);
  auto heads = c.integer(doc, "num_attention_heads", "num_attention_heads", 1, 1024, true);
  auto kv_heads = c.integer(doc, "num_key_value_heads", "num_key_value_heads", 1, 1024, false);
  auto head_dim = c.integer(doc, "head_dim", "head_dim", 1, 65536, false);
  auto vocab = c.integer(doc, "vocab_size", "vocab_size", 1, 4194304, true);
  auto max_pos =
      c.integer(doc, "max_position_embeddings", "max_position_embeddings", 1, kMaxPositions, false);
  cfg.hidden_size = hidden.value_or(0);
  cfg.intermediate_size = inter.value_or(0);
  cfg.num_hidden_layers = layers.value_or(0);
  cfg.num_attention_heads = heads.value_or(0);
  cfg.vocab_size = vocab.value_or(0);
  // transformers' defaults when the key is absent.
  cfg.max_position_embeddings =
      max_pos.value_or(cfg.model_type == ModelType::kQwen2 ? 32768 : 2048);
  const bool head_dim_present = Checker::find(doc, "head_dim") != nullptr;
  if (!head_dim && !head_dim_present && hidden && heads) {
    if (*hidden % *heads != 0) {
      c.invalid("hidden_size=" + std::to_string(*hidden) +
                " is not a multiple of num_attention_heads=" + std::to_string(*heads) +
                " (and head_dim is not given)");
    } else {
      head_dim = *hidden / *heads;
    }
  }
  if (head_dim) {
    cfg.head_dim = *head_dim;
    if (*head_dim != kSupportedHeadDim) {
      c.unsupported("head_dim", std::to_string(*head_dim), std::to_string(kSupportedHeadDim));
    }
  }
  const bool kv_present = Checker::find(doc, "num_key_value_heads") != nullptr;
  if (!kv_heads && !kv_present) kv_heads = heads;  // multi-head attention
  if (kv_heads && heads) {
    cfg.num_key_value_heads = *kv_heads;
    if (*heads % *kv_heads != 0) {
      c.invalid("num_key_value_heads=" + std::to_string(*kv_heads) +
                " does not divide num_attention_heads=" + std::to_string(*heads));
    }
  }
}

// One rope_scaling / rope_parameters object. `name` is its key, for messages.
std::optional<RopeScaling> parse_rope_object(Checker& c, const Json& r, const std::string& name,
                                             bool type_required) {
  if (!r.is_object()) {
    c.wrong_type(name, "object", r);
    return std::nullopt;
  }
  // "type" is the key older transformers wrote; "rope_type" wins when both are present.
  const std::string key = r.contains("rope_type") || !r.contains("type") ? "rope_type" : "type";
  auto type = c.string(r, key, name + "." + key, type_required);
  if (!type && (type_required || Checker::find(r, key) != nullptr)) return std::nullopt;
  RopeScaling rope;
  if (!type || *type == "default") return rope;
  if (*type != "llama3") {
    c.unsupported(name + "." + key, json_quoted(*type), "\"llama3\", \"default\"");
    return std::nullopt;
  }
  rope.llama3 = true;
  auto factor = c.number(r, "factor", name + ".factor", 1.0, true, true);
  auto low = c.number(r, "low_freq_factor", name + ".low_freq_factor", 0.0, false, true);
  auto high = c.number(r, "high_freq_factor", name + ".high_freq_factor", 0.0, false, true);
  auto orig = c.integer(r, "original_max_position_embeddings",
                        name + ".original_max_position_embeddings", 1, kMaxPositions, true);
  if (!factor || !low || !high || !orig) return std::nullopt;
  if (*high <= *low) {
    c.invalid(name + ".high_freq_factor=" + json_brief(Json(*high)) + " must be greater than " +
              name + ".low_freq_factor=" + json_brief(Json(*low)));
    return std::nullopt;
  }
  rope.factor = *factor;
  rope.low_freq_factor = *low;
  rope.high_freq_factor = *high;
  rope.original_max_position_embeddings = *orig;
  return rope;
}

bool same_rope(const RopeScaling& a, const RopeScaling& b) {
  return a.llama3 == b.llama3 &&
         (!a.llama3 || (a.factor == b.factor && a.low_freq_factor == b.low_freq_factor &&
                        a.high_freq_factor == b.high_freq_factor &&
                        a.original_max_position_embeddings == b.original_max_position_embeddings));
}

void check_rope(Checker& c, const Json& doc, ModelConfig& cfg) {
  auto theta = c.number(doc, "rope_theta", "rope_theta", 0.0, false, false);
  std::optional<RopeScaling> legacy, params;
  if (const Json* r = Checker::find(doc, "rope_scaling")) {
    legacy = parse_rope_object(c, *r, "rope_scaling", /*type_required=*/true);
  }
  if (const Json* p = Checker::find(doc, "rope_parameters")) {
    params = parse_rope_object(c, *p, "rope_parameters", /*type_required=*/false);
    auto p_theta = p->is_object()
                       ? c.number(*p, "rope_theta", "rope_parameters.rope_theta", 0.0, false, false)
                       : std::nullopt;
    if (p_theta && theta && *p_theta != *theta) {
      c.invalid("rope_theta=" + json_brief(Json(*theta)) +
                " disagrees with rope_parameters.rope_theta=" + json_brief(Json(*p_theta)));
    }
    if (p_theta) theta = p_theta;
  }
  if (legacy && params && !same_rope(*legacy, *params)) {
    c.invalid("rope_scaling and rope_parameters disagree");
  }
  cfg.rope_theta = theta.value_or(10000.0);
  if (params)
    cfg.rope_scaling = *params;
  else if (legacy)
    cfg.rope_scaling = *legacy;
  if (auto prf = c.number(doc, "partial_rotary_factor", "partial_rotary_factor", 0.0, false, false);
      prf && *prf != 1.0) {
    c.unsupported("partial_rotary_factor", json_brief(Json(*prf)), "1.0");
  }
}

// Attention and MLP variants: activation, sliding windows, biases, latent attention.
void check_variants(Checker& c, const Json& doc, ModelConfig& cfg, bool known) {
  if (auto act = c.string(doc, "hidden_act", "hidden_act", false); act && *act != "silu") {
    c.unsupported("hidden_act", json_quoted(*act), "\"silu\"");
  }
  for (const char* key : {"kv_lora_rank", "q_lora_rank"}) {
    if (const Json* v = Checker::find(doc, key)) {
      c.unsupported(key, json_brief(*v), "absent; multi-head latent attention is not served");
    }
  }
  if (!known) return;
  if (cfg.model_type == ModelType::kQwen2) {
    cfg.qkv_bias = true;  // Qwen2 always has q/k/v biases
    if (c.boolean(doc, "use_sliding_window").value_or(false)) {
      c.unsupported("use_sliding_window", "true", "false");
    }
    if (const Json* lt = Checker::find(doc, "layer_types")) {
      if (!lt->is_array()) c.wrong_type("layer_types", "list of strings", *lt);
      for (size_t i = 0; lt->is_array() && i < lt->size(); ++i) {
        if ((*lt)[i] != "full_attention") {
          c.unsupported("layer_types[" + std::to_string(i) + "]", json_brief((*lt)[i]),
                        "\"full_attention\"");
          break;
        }
      }
    }
  } else {
    for (const char* key : {"attention_bias", "mlp_bias"}) {
      if (c.boolean(doc, key).value_or(false)) c.unsupported(key, "true", "false");
    }
  }
}

void check_tokens_and_norm(Checker& c, const Json& doc, ModelConfig& cfg) {
  cfg.rms_norm_eps =
      c.number(doc, "rms_norm_eps", "rms_norm_eps", 0.0, false, false).value_or(1e-6);
  cfg.tie_word_embeddings = c.boolean(doc, "tie_word_embeddings").value_or(false);
  const int64_t max_id = cfg.vocab_size > 0 ? cfg.vocab_size - 1 : 4194303;
  cfg.bos_token_id = c.integer(doc, "bos_token_id", "bos_token_id", 0, max_id, false);
  const Json* eos = Checker::find(doc, "eos_token_id");
  if (eos == nullptr) return;
  if (!eos->is_array()) {
    if (auto id = c.integer(doc, "eos_token_id", "eos_token_id", 0, max_id, false)) {
      cfg.eos_token_ids.push_back(*id);
    }
    return;
  }
  for (size_t i = 0; i < eos->size(); ++i) {
    const std::string field = "eos_token_id[" + std::to_string(i) + "]";
    const Json one = {{"id", (*eos)[i]}};
    if (auto id = c.integer(one, "id", field, 0, max_id, true)) cfg.eos_token_ids.push_back(*id);
  }
}

}  // namespace

ConfigParse parse_model_config(const Json& doc, const std::string& source) {
  Checker c(source);
  if (!doc.is_object()) {
    c.invalid("expected a JSON object, found " + std::string(json_type_name(doc)));
    return std::move(c).finish(std::nullopt);
  }
  ModelConfig cfg;
  const bool known = check_model_type(c, doc, cfg) != nullptr;
  check_dtype_and_quantization(c, doc, cfg);
  check_dimensions(c, doc, cfg);
  check_variants(c, doc, cfg, known);
  check_rope(c, doc, cfg);
  check_tokens_and_norm(c, doc, cfg);
  return std::move(c).finish(std::move(cfg));
}

ConfigParse read_model_config(const std::string& model_dir) {
  ConfigParse out;
  auto fail = [&out](Status s) {
    out.code = s.code();
    out.errors.push_back(s.message());
    return out;
  };
  if (!is_directory(model_dir)) return fail(not_found(model_dir + ": no such model directory"));
  const std::string path = model_dir + "/config.json";
  if (!is_regular_file(path)) {
    return fail(not_found(path + ": no such file (a model directory holds config.json)"));
  }
  // config.json files are a few KB; 16 MB leaves room for anything real.
  auto doc = read_json_file(path, 16u << 20);
  if (!doc.is_ok()) return fail(doc.status());
  return parse_model_config(*doc, path);
}

Result<ModelConfig> load_model_config(const std::string& model_dir) {
  ConfigParse parse = read_model_config(model_dir);
  if (!parse.config) return Status(parse.code, parse.errors.front());
  return std::move(*parse.config);
}

int64_t count_parameters(const ModelConfig& cfg) {
  const int64_t h = cfg.hidden_size;
  const int64_t q = cfg.num_attention_heads * cfg.head_dim;
  const int64_t kv = cfg.num_key_value_heads * cfg.head_dim;
  int64_t layer = h * q + 2 * h * kv + q * h       // q, k, v, o projections
                  + 3 * h * cfg.intermediate_size  // gate, up, down
                  + 2 * h;                         // input and post-attention RMSNorm
  if (cfg.qkv_bias) layer += q + 2 * kv;
  const int64_t embed = cfg.vocab_size * h;
  return embed + cfg.num_hidden_layers * layer + h + (cfg.tie_word_embeddings ? 0 : embed);
}

}  // namespace s4kv::model
