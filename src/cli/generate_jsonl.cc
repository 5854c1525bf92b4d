#include "cli/generate_jsonl.h"

#include <array>
#include <utility>

namespace s4kv::cli {
namespace {

using engine::SamplingParams;

Status type_error(const std::string& key, const OrderedJson& v, std::string_view expected) {
  return invalid_argument(key + ": expected " + std::string(expected) + ", found " +
                          std::string(v.type_name()));
}

Result<int64_t> get_int(const std::string& key, const OrderedJson& v) {
  if (!v.is_number_integer()) return type_error(key, v, "an integer");
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT64_MAX}) {
    return type_error(key, v, "an integer that fits 64 bits");
  }
  return v.get<int64_t>();
}

Result<double> get_number(const std::string& key, const OrderedJson& v) {
  if (!v.is_number()) return type_error(key, v, "a number");
  return v.get<double>();
}

Result<bool> get_bool(const std::string& key, const OrderedJson& v) {
  if (!v.is_boolean()) return type_error(key, v, "true or false");
  return v.get<bool>();
}

Result<std::vector<std::string>> get_stop(const std::string& key, const OrderedJson& v) {
  if (v.is_string()) return std::vector<std::string>{v.get<std::string>()};
  if (!v.is_array()) return type_error(key, v, "a string or a list of strings");
  std::vector<std::string> out;
  for (const OrderedJson& s : v) {
    if (!s.is_string()) return type_error(key, v, "a string or a list of strings");
    out.push_back(s.get<std::string>());
  }
  return out;
}

Result<std::vector<int64_t>> get_ids(const std::string& key, const OrderedJson& v) {
  if (!v.is_array()) return type_error(key, v, "a list of token ids");
  std::vector<int64_t> out;
  for (const OrderedJson& x : v) {
    S4KV_ASSIGN_OR_RETURN(const int64_t id, get_int(key, x));
    out.push_back(id);
  }
  return out;
}

// Applies one sampling field; false when the key is not a sampling field.
Result<bool> apply_field(const std::string& k, const OrderedJson& v, SamplingParams& p) {
  if (v.is_null()) return true;  // null: keep the default, as OpenAI clients send it
  if (k == "max_tokens") {
    S4KV_ASSIGN_OR_RETURN(p.max_tokens, get_int(k, v));
  } else if (k == "temperature") {
    S4KV_ASSIGN_OR_RETURN(p.temperature, get_number(k, v));
  } else if (k == "top_p") {
    S4KV_ASSIGN_OR_RETURN(p.top_p, get_number(k, v));
  } else if (k == "top_k") {
    S4KV_ASSIGN_OR_RETURN(p.top_k, get_int(k, v));
  } else if (k == "min_p") {
    S4KV_ASSIGN_OR_RETURN(p.min_p, get_number(k, v));
  } else if (k == "seed") {
    S4KV_ASSIGN_OR_RETURN(p.seed, get_int(k, v));
  } else if (k == "n") {
    S4KV_ASSIGN_OR_RETURN(p.n, get_int(k, v));
  } else if (k == "min_tokens") {
    S4KV_ASSIGN_OR_RETURN(p.min_tokens, get_int(k, v));
  } else if (k == "presence_penalty") {
    S4KV_ASSIGN_OR_RETURN(p.presence_penalty, get_number(k, v));
  } else if (k == "frequency_penalty") {
    S4KV_ASSIGN_OR_RETURN(p.frequency_penalty, get_number(k, v));
  } else if (k == "repetition_penalty") {
    S4KV_ASSIGN_OR_RETURN(p.repetition_penalty, get_number(k, v));
  } else if (k == "ignore_eos") {
    S4KV_ASSIGN_OR_RETURN(p.ignore_eos, get_bool(k, v));
  } else if (k == "include_stop_str_in_output") {
    S4KV_ASSIGN_OR_RETURN(p.include_stop_str_in_output, get_bool(k, v));
  } else if (k == "skip_special_tokens") {
    S4KV_ASSIGN_OR_RETURN(p.skip_special_tokens, get_bool(k, v));
  } else if (k == "stop") {
    S4KV_ASSIGN_OR_RETURN(p.stop, get_stop(k, v));
  } else if (k == "stop_token_ids") {
    S4KV_ASSIGN_OR_RETURN(p.stop_token_ids, get_ids(k, v));
  } else {
    return false;
  }
  return true;
}

}  // namespace

Result<JsonlRequest> parse_jsonl_request(std::string_view line, const SamplingParams& defaults) {
  S4KV_ASSIGN_OR_RETURN(const OrderedJson doc, parse_ordered_json(line, "JSON line"));
  if (!doc.is_object()) {
    return invalid_argument("expected a JSON object, found " + std::string(doc.type_name()));
  }
  JsonlRequest r;
  r.params = defaults;
  for (const auto& [key, value] : doc.items()) {
    if (key == "prompt") {
      if (!value.is_string()) return type_error(key, value, "a string");
      r.prompt = value.get<std::string>();
      continue;
    }
    if (key == "messages") {
      if (!value.is_array()) return type_error(key, value, "a list of messages");
      r.messages = value;
      continue;
    }
    S4KV_ASSIGN_OR_RETURN(const bool known, apply_field(key, value, r.params));
    if (!known) return invalid_argument("unknown field \"" + key + "\"");
  }
  if (r.prompt.has_value() == r.messages.has_value()) {
    return invalid_argument("give exactly one of \"prompt\" and \"messages\"");
  }
  return r;
}

}  // namespace s4kv::cli
