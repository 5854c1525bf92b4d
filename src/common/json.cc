#include "common/json.h"

#include <set>
#include <vector>

#include "common/file.h"

namespace s4kv {

namespace {

// One parser for both key orders: J is Json or OrderedJson.
template <typename J>
Result<J> parse_json_as(std::string_view text, std::string_view source, JsonLimits limits) {
  // The callback sees every event with its depth; it records the first violation and
  // keeps parsing (returning false would only drop values, not stop the parser).
  std::string violation;
  std::vector<std::set<std::string>> keys;
  auto callback = [&](int depth, typename J::parse_event_t event, J& parsed) -> bool {
    if (!violation.empty()) return true;
    switch (event) {
      case J::parse_event_t::object_start:
      case J::parse_event_t::array_start:
        if (depth >= limits.max_depth) {
          violation = "nesting deeper than " + std::to_string(limits.max_depth) + " levels";
        }
        if (event == Json::parse_event_t::object_start) keys.emplace_back();
        break;
      case J::parse_event_t::object_end:
        if (!keys.empty()) keys.pop_back();
        break;
      case J::parse_event_t::key:
        if (!limits.allow_duplicate_keys && !keys.empty() &&
            !keys.back().insert(parsed.template get<std::string>()).second) {
          violation = "duplicate key \"" + parsed.template get<std::string>() + "\"";
        }
        break;
      default:
        break;
    }
    return true;
  };
  J result;
  try {
    result = J::parse(text.begin(), text.end(), callback, /*allow_exceptions=*/true,
                      /*ignore_comments=*/false);
  } catch (const typename J::exception& e) {
    std::string what = e.what();
    // nlohmann prefixes "[json.exception.parse_error.101] "; the byte position is kept.
    if (auto pos = what.find("] "); pos != std::string::npos) what = what.substr(pos + 2);
    return invalid_argument(std::string(source) + " is not valid JSON: " + what);
  }
  if (!violation.empty()) {
    return invalid_argument(std::string(source) + " is not accepted: " + violation);
  }
  return result;
}

}  // namespace

Result<Json> parse_json(std::string_view text, std::string_view source, JsonLimits limits) {
  return parse_json_as<Json>(text, source, limits);
}

Result<OrderedJson> parse_ordered_json(std::string_view text, std::string_view source,
                                       JsonLimits limits) {
  return parse_json_as<OrderedJson>(text, source, limits);
}

Result<Json> read_json_file(const std::string& path, size_t max_bytes, JsonLimits limits) {
  S4KV_ASSIGN_OR_RETURN(std::string text, read_file(path, max_bytes));
  return parse_json(text, path, limits);
}

std::string json_brief(const Json& v) {
  std::string s;
  try {
    s = v.dump(-1, ' ', /*ensure_ascii=*/true, Json::error_handler_t::replace);
  } catch (const Json::exception&) {
    return "<unprintable>";
  }
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

std::string_view json_type_name(const Json& v) {
  if (v.is_number_integer() || v.is_number_unsigned()) return "integer";
  if (v.is_number_float()) return "number";
  if (v.is_boolean()) return "boolean";
  if (v.is_string()) return "string";
  if (v.is_null()) return "null";
  if (v.is_array()) return "array";
  if (v.is_object()) return "object";
  return "value";
}

}  // namespace s4kv
