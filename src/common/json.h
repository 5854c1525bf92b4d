// Bounded JSON parsing for untrusted input (config files, safetensors headers, requests).
// nlohmann::json alone has no depth limit and silently keeps the last of duplicate keys;
// parse_json refuses both, and never throws.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/status.h"

namespace s4kv {

using Json = nlohmann::json;
// Keeps object keys in document order (requests whose key order is visible, e.g. tool schemas
// rendered by a chat template's tojson, and reports printed in a fixed order).
using OrderedJson = nlohmann::ordered_json;

struct JsonLimits {
  int max_depth = 64;  // nesting of arrays and objects
  bool allow_duplicate_keys = false;
};

// Parses text. `source` names the input in error messages (a path, "request body" ...).
Result<Json> parse_json(std::string_view text, std::string_view source, JsonLimits limits = {});

// parse_json keeping object keys in document order.
Result<OrderedJson> parse_ordered_json(std::string_view text, std::string_view source,
                                       JsonLimits limits = {});

// Reads a whole file (refusing files over max_bytes) and parses it.
Result<Json> read_json_file(const std::string& path, size_t max_bytes = 64u << 20,
                            JsonLimits limits = {});

// Short rendering of a JSON value for error messages ("foo", 12, [..], {..}); at most ~80 chars.
std::string json_brief(const Json& v);

// Name of the JSON type for error messages: "string", "integer", "number", "boolean", ...
std::string_view json_type_name(const Json& v);

}  // namespace s4kv
