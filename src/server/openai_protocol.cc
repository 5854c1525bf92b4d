// Request bodies of /v1/chat/completions and /v1/completions read into ChatRequest and
// CompletionRequest: JSON types checked field by field (null reads as unset), vLLM's
// defaults (generation_config.json's sampling defaults for unset fields), known-but-
// unimplemented fields refused by name, unknown fields ignored, and ranges checked by
// SamplingParams::validate. Messages and prompts are in openai_prompt.cc.
#include "server/openai_protocol.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <utility>

namespace s4kv::server {
namespace {

using engine::SamplingParams;

ApiError type_error(std::string_view field, std::string_view expected, const OrderedJson& got) {
  return bad_request(std::string(field) + ": expected " + std::string(expected) + ", got " +
                         std::string(json_kind(got)) + ".",
                     std::string(field));
}

// Not an int64: names the actual type, and the value when it is a number (1.5, 1e30).
ApiError int_error(std::string_view field, const OrderedJson& got) {
  if (!got.is_number()) return type_error(field, "integer", got);
  const double d = got.get<double>();
  const bool integral = std::isfinite(d) && d == std::floor(d);
  return bad_request(std::string(field) + ": expected " +
                         (integral ? "an integer within the signed 64-bit range"
                                   : "integer, got fractional number") +
                         (integral ? ", got " : " ") + got.dump() + ".",
                     std::string(field));
}

// A list or object over its limit: "stop: at most 4 stop strings per request, got 5."
ApiError too_many(std::string_view field, size_t limit, std::string_view what, size_t got) {
  return bad_request(std::string(field) + ": at most " + std::to_string(limit) + " " +
                         std::string(what) + " per request, got " + std::to_string(got) + ".",
                     std::string(field));
}

ApiError unsupported_field(std::string_view field, std::string_view detail) {
  return bad_request(std::string(field) + ": " + std::string(detail), std::string(field));
}

// An integer, or a float with an integral value (as pydantic accepts 2.0 for an int).
bool as_int64(const OrderedJson& v, int64_t& out) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    out = static_cast<int64_t>(u);
    return true;
  }
  if (v.is_number_integer()) {
    out = v.get<int64_t>();
    return true;
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || std::abs(d) >= 9.2e18) return false;
    out = static_cast<int64_t>(d);
    return true;
  }
  return false;
}

// Reads typed fields of one JSON object; each read_* returns false with the error set when
// the field has the wrong type, and leaves `out` alone when the field is absent or null.
class FieldReader {
 public:
  FieldReader(const OrderedJson& body, ApiError& error) : body_(body), error_(error) {}

  const OrderedJson* find(std::string_view name) const {
    const auto it = body_.find(name);
    if (it == body_.end() || it->is_null()) return nullptr;
    return &*it;
  }
  bool fail(ApiError e) {
    error_ = std::move(e);
    return false;
  }
  ApiError& error() { return error_; }

  bool read_bool(std::string_view name, bool& out) {
    const OrderedJson* v = find(name);
    if (v == nullptr) return true;
    if (!v->is_boolean()) return fail(type_error(name, "boolean", *v));
    out = v->get<bool>();
    return true;
  }
  template <typename T>  // int64_t or std::optional<int64_t>
  bool read_int(std::string_view name, T& out) {
    const OrderedJson* v = find(name);
    if (v == nullptr) return true;
    int64_t i = 0;
    if (!as_int64(*v, i)) return fail(int_error(name, *v));
    out = i;
    return true;
  }
  template <typename T>  // double or std::optional<double>
  bool read_number(std::string_view name, T& out) {
    const OrderedJson* v = find(name);
    if (v == nullptr) return true;
    if (!v->is_number()) return fail(type_error(name, "number", *v));
    out = v->get<double>();
    return true;
  }
  bool read_string(std::string_view name, std::optional<std::string>& out) {
    const OrderedJson* v = find(name);
    if (v == nullptr) return true;
    if (!v->is_string()) return fail(type_error(name, "string", *v));
    out = v->get<std::string>();
    return true;
  }

 private:
  const OrderedJson& body_;
  ApiError& error_;
};

bool read_stop(FieldReader& r, SamplingParams& p) {
  const OrderedJson* v = r.find("stop");
  if (v == nullptr) return true;
  if (v->is_string()) {
    p.stop = {v->get<std::string>()};
    return true;
  }
  if (!v->is_array()) return r.fail(type_error("stop", "string or array of strings", *v));
  if (v->size() > kMaxStopStrings) {
    return r.fail(too_many("stop", kMaxStopStrings, "stop strings", v->size()));
  }
  for (const OrderedJson& s : *v) {
    if (!s.is_string()) return r.fail(type_error("stop", "array of strings", s));
    p.stop.push_back(s.get<std::string>());
  }
  return true;
}

bool read_stop_token_ids(FieldReader& r, SamplingParams& p) {
  const OrderedJson* v = r.find("stop_token_ids");
  if (v == nullptr) return true;
  if (!v->is_array()) return r.fail(type_error("stop_token_ids", "array of integers", *v));
  if (v->size() > kMaxStopTokenIds) {
    return r.fail(too_many("stop_token_ids", kMaxStopTokenIds, "stop token ids", v->size()));
  }
  for (const OrderedJson& id : *v) {
    int64_t i = 0;
    if (!as_int64(id, i)) return r.fail(type_error("stop_token_ids", "array of integers", id));
    p.stop_token_ids.push_back(i);
  }
  return true;
}

bool read_logit_bias(FieldReader& r, SamplingParams& p) {
  const OrderedJson* v = r.find("logit_bias");
  if (v == nullptr) return true;
  if (!v->is_object()) return r.fail(type_error("logit_bias", "object", *v));
  if (v->size() > kMaxLogitBias) {
    return r.fail(too_many("logit_bias", kMaxLogitBias, "entries", v->size()));
  }
  for (const auto& [key, bias] : v->items()) {
    int64_t id = 0;
    const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
    if (ec != std::errc() || end != key.data() + key.size() || key.empty()) {
      return r.fail(
          bad_request("logit_bias: keys must be token ids, got \"" + key + "\".", "logit_bias"));
    }
    if (!bias.is_number()) return r.fail(type_error("logit_bias", "number values", bias));
    p.logit_bias[id] = bias.get<double>();
  }
  return true;
}

// Fields both APIs share, over generation_config's defaults.
bool read_sampling(FieldReader& r, const ModelContext& model, SamplingParams& p) {
  const engine::GenerationConfig& g = model.generation_config;
  p.temperature = g.temperature.value_or(p.temperature);
  p.top_p = g.top_p.value_or(p.top_p);
  p.top_k = g.top_k.value_or(p.top_k);
  p.min_p = g.min_p.value_or(p.min_p);
  p.repetition_penalty = g.repetition_penalty.value_or(p.repetition_penalty);
  std::optional<int64_t> seed;
  const bool ok =
      r.read_int("n", p.n) && r.read_number("temperature", p.temperature) &&
      r.read_number("top_p", p.top_p) && r.read_int("top_k", p.top_k) &&
      r.read_number("min_p", p.min_p) && r.read_number("presence_penalty", p.presence_penalty) &&
      r.read_number("frequency_penalty", p.frequency_penalty) &&
      r.read_number("repetition_penalty", p.repetition_penalty) && r.read_int("seed", seed) &&
      r.read_int("min_tokens", p.min_tokens) && r.read_bool("ignore_eos", p.ignore_eos) &&
      r.read_bool("include_stop_str_in_output", p.include_stop_str_in_output) &&
      r.read_bool("skip_special_tokens", p.skip_special_tokens) && read_stop(r, p) &&
      read_stop_token_ids(r, p) && read_logit_bias(r, p);
  if (!ok) return false;
  if (seed && *seed != -1) p.seed = seed;
  return true;
}

bool read_stream(FieldReader& r, bool& stream, StreamOptions& options) {
  if (!r.read_bool("stream", stream)) return false;
  const OrderedJson* v = r.find("stream_options");
  if (v == nullptr) return true;
  if (!v->is_object()) return r.fail(type_error("stream_options", "object", *v));
  if (!stream) {
    return r.fail(
        bad_request("Stream options can only be defined when `stream=True`.", "stream_options"));
  }
  FieldReader o(*v, r.error());
  if (o.read_bool("include_usage", options.include_usage) &&
      o.read_bool("continuous_usage_stats", options.continuous_usage_stats)) {
    return true;
  }
  r.error().param = "stream_options";
  return false;
}

// The model field: absent or any served name (else 404); responses report the first
// served name whichever one the request used, as vllm serve does.
bool read_model(FieldReader& r, const ModelContext& model, std::string& out) {
  std::optional<std::string> name;
  if (!r.read_string("model", name)) return false;
  S4KV_CHECK(!model.served_model_names.empty(), "no served model name");
  const auto& names = model.served_model_names;
  if (!name || std::find(names.begin(), names.end(), *name) != names.end()) {
    out = names.front();
    return true;
  }
  return r.fail(api_error(404, "The model `" + *name + "` does not exist.", "model"));
}

// Fields we know and do not implement: refused by name rather than silently ignored.
bool refuse_unimplemented(FieldReader& r, const SamplingParams& p) {
  if (const OrderedJson* v = r.find("response_format")) {
    const bool text = v->is_object() && v->contains("type") && (*v)["type"] == "text";
    if (!text) {
      return r.fail(unsupported_field(
          "response_format", "only {\"type\": \"text\"} is supported (no structured output)."));
    }
  }
  // Known to vLLM or OpenAI and changing the output if honored: refused rather than ignored.
  for (const char* field : {"guided_json", "guided_regex", "guided_choice", "guided_grammar",
                            "structured_outputs", "prompt_logprobs", "allowed_token_ids",
                            "bad_words", "truncate_prompt_tokens", "prediction", "audio"}) {
    if (r.find(field) != nullptr) return r.fail(unsupported_field(field, "is not supported."));
  }
  // Accepted at their defaults only.
  for (const auto& [field, default_value] :
       {std::pair{"use_beam_search", false}, std::pair{"return_tokens_as_token_ids", false},
        std::pair{"spaces_between_special_tokens", true}}) {
    bool value = default_value;
    if (!r.read_bool(field, value)) return false;
    if (value != default_value) {
      return r.fail(unsupported_field(
          field, std::string("is only supported as ") + (default_value ? "true." : "false.")));
    }
  }
  int64_t priority = 0;
  if (!r.read_int("priority", priority)) return false;
  if (priority != 0) {
    return r.fail(
        unsupported_field("priority", "is only supported as 0 (no priority scheduling)."));
  }
  if (const OrderedJson* v = r.find("modalities")) {
    if (*v != OrderedJson::array({"text"})) {
      return r.fail(unsupported_field("modalities", "only [\"text\"] is supported."));
    }
  }
  std::optional<int64_t> best_of;
  if (!r.read_int("best_of", best_of)) return false;
  if (best_of && *best_of < p.n) {
    return r.fail(bad_request(
        "best_of must be greater than or equal to n, got " + std::to_string(*best_of) + ".",
        "best_of"));
  }
  if (best_of && *best_of > p.n) {
    return r.fail(unsupported_field("best_of", "best_of greater than n is not supported."));
  }
  std::optional<std::string> user;
  return r.read_string("user", user);
}

// SamplingParams::validate, leaving a max_tokens beyond the context to the length check.
bool validate_params(FieldReader& r, const ModelContext& model, const SamplingParams& p) {
  SamplingParams copy = p;
  if (copy.max_tokens && *copy.max_tokens > model.max_model_len) {
    copy.max_tokens = model.max_model_len;
  }
  const Status s = copy.validate(model.vocab_size, model.max_model_len);
  if (s.is_ok()) return true;
  return r.fail(bad_request(s.message(), std::string(engine::error_param(s.message()))));
}

bool read_tools(FieldReader& r, ChatRequest& req) {
  if (const OrderedJson* v = r.find("tools")) {
    if (!v->is_array()) return r.fail(type_error("tools", "array", *v));
    if (v->size() > kMaxTools) return r.fail(too_many("tools", kMaxTools, "tools", v->size()));
    for (const OrderedJson& tool : *v) {
      const bool ok = tool.is_object() && (!tool.contains("type") || tool["type"] == "function") &&
                      tool.contains("function") && tool["function"].is_object() &&
                      tool["function"].contains("name") && tool["function"]["name"].is_string();
      if (!ok) {
        return r.fail(bad_request(
            "tools: each tool must be {\"type\": \"function\", \"function\": {\"name\": ...}}.",
            "tools"));
      }
    }
    req.tools = *v;
  }
  for (const char* field : {"functions", "function_call"}) {
    if (r.find(field) != nullptr) {
      return r.fail(unsupported_field(field, "is deprecated and not supported; use tools."));
    }
  }
  const OrderedJson* choice = r.find("tool_choice");
  if (choice == nullptr || *choice == "none") return true;
  if (*choice == "auto") {
    if (req.tools.is_null()) {
      return r.fail(bad_request("When using `tool_choice`, `tools` must be set.", "tool_choice"));
    }
    return true;
  }
  return r.fail(unsupported_field(
      "tool_choice", "only \"none\" and \"auto\" are supported (no forced tool calls)."));
}

bool read_chat_logprobs(FieldReader& r, ChatRequest& req) {
  bool logprobs = false;
  std::optional<int64_t> top;
  if (!r.read_bool("logprobs", logprobs) || !r.read_int("top_logprobs", top)) return false;
  if (top && (*top < 0 || *top > engine::kMaxLogprobs)) {
    return r.fail(bad_request("top_logprobs must be in [0, " +
                                  std::to_string(engine::kMaxLogprobs) + "], got " +
                                  std::to_string(*top) + ".",
                              "top_logprobs"));
  }
  if (top && *top > 0 && !logprobs) {
    return r.fail(
        bad_request("when using `top_logprobs`, `logprobs` must be set to true.", "top_logprobs"));
  }
  if (logprobs) req.top_logprobs = top.value_or(0);
  req.params.logprobs = req.top_logprobs;
  return true;
}

bool read_chat_template_options(FieldReader& r, ChatRequest& req) {
  std::optional<bool> add_generation_prompt;
  if (const OrderedJson* v = r.find("add_generation_prompt")) {
    if (!v->is_boolean()) return r.fail(type_error("add_generation_prompt", "boolean", *v));
    add_generation_prompt = v->get<bool>();
  }
  if (!r.read_bool("continue_final_message", req.continue_final_message) ||
      !r.read_bool("add_special_tokens", req.add_special_tokens)) {
    return false;
  }
  if (req.continue_final_message && add_generation_prompt.value_or(false)) {
    return r.fail(
        bad_request("Cannot set both `continue_final_message` and `add_generation_prompt` to True.",
                    "continue_final_message"));
  }
  req.add_generation_prompt = add_generation_prompt.value_or(!req.continue_final_message);
  if (const OrderedJson* v = r.find("chat_template_kwargs")) {
    if (!v->is_object()) return r.fail(type_error("chat_template_kwargs", "object", *v));
    req.chat_template_kwargs = *v;
  }
  if (r.find("chat_template") != nullptr) {
    return r.fail(unsupported_field(
        "chat_template", "templates sent in requests are not rendered; the server's is used."));
  }
  return true;
}

// A list of token ids, each in the vocabulary.
bool read_token_ids(FieldReader& r, const OrderedJson& list, const ModelContext& model,
                    std::vector<int32_t>& out) {
  if (list.empty()) return r.fail(bad_request("prompt: a token-id list is empty.", "prompt"));
  for (const OrderedJson& v : list) {
    int64_t id = 0;
    if (!as_int64(v, id)) return r.fail(type_error("prompt", "token ids (integers)", v));
    if (id < 0 || id >= model.vocab_size) {
      return r.fail(bad_request("prompt contains an out-of-vocabulary token id " +
                                    std::to_string(id) + " (vocabulary size " +
                                    std::to_string(model.vocab_size) + ").",
                                "prompt"));
    }
    out.push_back(static_cast<int32_t>(id));
  }
  return true;
}

// "prompt": a string, a list of strings, a list of token ids or a list of token-id lists.
bool read_prompts(FieldReader& r, const ModelContext& model, std::vector<CompletionPrompt>& out) {
  const OrderedJson* v = r.find("prompt");
  if (v == nullptr) return r.fail(bad_request("prompt: field required.", "prompt"));
  if (v->is_string()) {
    out.push_back({v->get<std::string>(), {}});
    return true;
  }
  const char* kExpected = "a string, a list of strings, token ids or token-id lists";
  if (!v->is_array()) return r.fail(type_error("prompt", kExpected, *v));
  if (v->empty()) return r.fail(bad_request("prompt: the list is empty.", "prompt"));
  const OrderedJson& first = v->front();
  if (first.is_number()) {  // one prompt of token ids; its length is checked against the context
    out.emplace_back();
    return read_token_ids(r, *v, model, out.back().token_ids);
  }
  if (v->size() > kMaxPrompts) {
    return r.fail(too_many("prompt", kMaxPrompts, "prompts", v->size()));
  }
  for (const OrderedJson& item : *v) {
    if (first.is_string() && item.is_string()) {
      out.push_back({item.get<std::string>(), {}});
    } else if (first.is_array() && item.is_array()) {
      out.emplace_back();
      if (!read_token_ids(r, item, model, out.back().token_ids)) return false;
    } else {
      return r.fail(type_error("prompt", kExpected, item));
    }
  }
  return true;
}

bool read_completion_fields(FieldReader& r, CompletionRequest& req) {
  std::optional<std::string> suffix;
  const bool ok = r.read_int("max_tokens", req.params.max_tokens) &&
                  r.read_int("logprobs", req.params.logprobs) && r.read_bool("echo", req.echo) &&
                  r.read_bool("add_special_tokens", req.add_special_tokens) &&
                  r.read_string("suffix", suffix) && read_stream(r, req.stream, req.stream_options);
  if (!ok) return false;
  if (suffix && !suffix->empty()) {
    return r.fail(unsupported_field("suffix", "is not supported (no fill-in-the-middle)."));
  }
  if (req.echo && req.params.logprobs) {
    return r.fail(unsupported_field(
        "echo", "echo together with logprobs is not supported (no prompt logprobs)."));
  }
  return true;
}

}  // namespace

std::string_view json_kind(const OrderedJson& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "boolean";
  if (v.is_number_integer()) return "integer";
  if (v.is_number()) return "number";
  if (v.is_string()) return "string";
  if (v.is_array()) return "array";
  if (v.is_object()) return "object";
  return "binary";
}

std::optional<ChatRequest> parse_chat_request(const OrderedJson& body, const ModelContext& model,
                                              ApiError& error) {
  if (!body.is_object()) {
    error = bad_request("The request body must be a JSON object.");
    return std::nullopt;
  }
  FieldReader r(body, error);
  ChatRequest req;
  if (!read_model(r, model, req.model)) return std::nullopt;
  const OrderedJson* messages = r.find("messages");
  if (messages == nullptr) {
    error = bad_request("messages: field required.", "messages");
    return std::nullopt;
  }
  auto normalized = normalize_chat_messages(*messages, error);
  if (!normalized) return std::nullopt;
  req.messages = std::move(*normalized);
  std::optional<int64_t> max_completion_tokens;
  bool echo = false;  // vLLM's: prepend the final message's text; not implemented
  const bool ok = r.read_bool("echo", echo) && read_sampling(r, model, req.params) &&
                  r.read_int("max_tokens", req.params.max_tokens) &&
                  r.read_int("max_completion_tokens", max_completion_tokens) &&
                  read_chat_logprobs(r, req) && read_stream(r, req.stream, req.stream_options) &&
                  read_tools(r, req) && read_chat_template_options(r, req) &&
                  refuse_unimplemented(r, req.params);
  if (!ok) return std::nullopt;
  if (echo) {
    error = unsupported_field("echo", "is only supported as false on chat completions.");
    return std::nullopt;
  }
  if (max_completion_tokens) req.params.max_tokens = max_completion_tokens;
  if (!validate_params(r, model, req.params)) return std::nullopt;
  return req;
}

std::optional<CompletionRequest> parse_completion_request(const OrderedJson& body,
                                                          const ModelContext& model,
                                                          ApiError& error) {
  if (!body.is_object()) {
    error = bad_request("The request body must be a JSON object.");
    return std::nullopt;
  }
  FieldReader r(body, error);
  CompletionRequest req;
  const bool ok = read_model(r, model, req.model) && read_prompts(r, model, req.prompts) &&
                  read_sampling(r, model, req.params) && read_completion_fields(r, req) &&
                  refuse_unimplemented(r, req.params) && validate_params(r, model, req.params);
  if (!ok) return std::nullopt;
  return req;
}

}  // namespace s4kv::server
