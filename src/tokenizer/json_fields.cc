#include "tokenizer/json_fields.h"

namespace s4kv::tokenizer {
namespace {

std::string path(std::string_view where, std::string_view key) {
  return std::string(where) + (where.empty() ? "" : ".") + std::string(key);
}

Status wrong_type(std::string_view where, std::string_view key, std::string_view want,
                  const Json& got) {
  return invalid_argument("tokenizer.json field " + path(where, key) + " must be " +
                          std::string(want) + ", got " + std::string(json_type_name(got)) + " " +
                          json_brief(got));
}

}  // namespace

Result<const Json*> json_member(const Json& obj, std::string_view key, std::string_view where) {
  if (!obj.is_object()) {
    return invalid_argument("tokenizer.json field " +
                            std::string(where.empty() ? "(root)" : where) +
                            " must be an object, got " + std::string(json_type_name(obj)));
  }
  auto it = obj.find(std::string(key));
  if (it == obj.end()) {
    return invalid_argument("tokenizer.json field " + path(where, key) + " is missing");
  }
  return &*it;
}

Result<bool> json_bool(const Json& obj, std::string_view key, bool dflt, std::string_view where) {
  if (!obj.is_object()) return dflt;
  auto it = obj.find(std::string(key));
  if (it == obj.end() || it->is_null()) return dflt;
  if (!it->is_boolean()) return wrong_type(where, key, "a boolean", *it);
  return it->get<bool>();
}

Result<std::string> json_string(const Json& obj, std::string_view key, std::string_view dflt,
                                std::string_view where) {
  if (!obj.is_object()) return std::string(dflt);
  auto it = obj.find(std::string(key));
  if (it == obj.end() || it->is_null()) return std::string(dflt);
  if (!it->is_string()) return wrong_type(where, key, "a string", *it);
  return it->get<std::string>();
}

Result<std::string> json_required_string(const Json& obj, std::string_view key,
                                         std::string_view where) {
  S4KV_ASSIGN_OR_RETURN(const Json* v, json_member(obj, key, where));
  if (!v->is_string()) return wrong_type(where, key, "a string", *v);
  return v->get<std::string>();
}

Result<int32_t> json_id(const Json& v, std::string_view where) {
  if (v.is_number_unsigned() && v.get<uint64_t>() < (uint64_t{1} << 31)) {
    return static_cast<int32_t>(v.get<uint64_t>());
  }
  if (v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < (int64_t{1} << 31)) {
    return static_cast<int32_t>(v.get<int64_t>());
  }
  return invalid_argument("tokenizer.json field " + std::string(where) +
                          " must be a token id (integer 0..2^31-1), got " + json_brief(v));
}

}  // namespace s4kv::tokenizer
