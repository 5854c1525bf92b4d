#include "engine/generation_config.h"

#include <algorithm>

#include "common/file.h"

namespace s4kv::engine {
namespace {

Status field_error(const std::string& source, const std::string& field, const Json& v,
                   std::string_view expected) {
  return invalid_argument("invalid " + source + ": " + field + ": expected " +
                          std::string(expected) + ", found " + json_brief(v));
}

Result<int32_t> token_id(const std::string& source, const std::string& field, const Json& v,
                         int64_t vocab_size) {
  if (!v.is_number_integer()) return field_error(source, field, v, "an integer token id");
  const auto id = v.get<int64_t>();
  if (id < 0 || id >= vocab_size) {
    return field_error(source, field, v, "a token id in [0, " + std::to_string(vocab_size) + ")");
  }
  return static_cast<int32_t>(id);
}

Status parse_eos(const Json& doc, const std::string& source, int64_t vocab_size,
                 GenerationConfig& out) {
  const auto it = doc.find("eos_token_id");
  if (it == doc.end() || it->is_null()) return Status::ok();
  if (!it->is_array()) {
    S4KV_ASSIGN_OR_RETURN(int32_t id, token_id(source, "eos_token_id", *it, vocab_size));
    out.eos_token_ids.push_back(id);
    return Status::ok();
  }
  for (size_t i = 0; i < it->size(); ++i) {
    const std::string field = "eos_token_id[" + std::to_string(i) + "]";
    S4KV_ASSIGN_OR_RETURN(int32_t id, token_id(source, field, (*it)[i], vocab_size));
    out.eos_token_ids.push_back(id);
  }
  return Status::ok();
}

template <typename T>
Status optional_number(const Json& doc, const std::string& source, const char* key,
                       std::optional<T>& out) {
  const auto it = doc.find(key);
  if (it == doc.end() || it->is_null()) return Status::ok();
  constexpr bool kInteger = std::is_integral_v<T>;
  if (kInteger ? !it->is_number_integer() : !it->is_number()) {
    return field_error(source, key, *it, kInteger ? "an integer" : "a number");
  }
  out = it->get<T>();
  return Status::ok();
}

}  // namespace

Result<GenerationConfig> parse_generation_config(const Json& doc, const std::string& source,
                                                 int64_t vocab_size) {
  if (!doc.is_object()) {
    return invalid_argument("invalid " + source + ": expected a JSON object, found " +
                            std::string(json_type_name(doc)));
  }
  GenerationConfig g;
  S4KV_RETURN_IF_ERROR(parse_eos(doc, source, vocab_size, g));
  S4KV_RETURN_IF_ERROR(optional_number(doc, source, "temperature", g.temperature));
  S4KV_RETURN_IF_ERROR(optional_number(doc, source, "top_p", g.top_p));
  S4KV_RETURN_IF_ERROR(optional_number(doc, source, "top_k", g.top_k));
  S4KV_RETURN_IF_ERROR(optional_number(doc, source, "min_p", g.min_p));
  S4KV_RETURN_IF_ERROR(optional_number(doc, source, "repetition_penalty", g.repetition_penalty));
  S4KV_RETURN_IF_ERROR(optional_number(doc, source, "max_new_tokens", g.max_new_tokens));
  return g;
}

Result<GenerationConfig> read_generation_config(const std::string& model_dir, int64_t vocab_size) {
  const std::string path = model_dir + "/generation_config.json";
  if (!is_regular_file(path)) return GenerationConfig{};
  S4KV_ASSIGN_OR_RETURN(Json doc, read_json_file(path, 1u << 20));
  return parse_generation_config(doc, path, vocab_size);
}

std::vector<int32_t> resolve_eos_token_ids(const GenerationConfig& gen,
                                           std::span<const int64_t> config_eos_token_ids) {
  std::vector<int32_t> ids = gen.eos_token_ids;
  for (int64_t id : config_eos_token_ids) {
    const auto id32 = static_cast<int32_t>(id);
    if (std::find(ids.begin(), ids.end(), id32) == ids.end()) ids.push_back(id32);
  }
  return ids;
}

}  // namespace s4kv::engine
