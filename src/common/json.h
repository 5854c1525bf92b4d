// Bounded JSON parsing for untrusted input (config files, safetensors headers, requests).
// nlohmann::json alone has no depth limit, silently keeps the last of duplicate keys, skips a
// leading UTF-8 byte order mark, and builds ordered objects with a linear search per key
// (quadratic in the number of keys). parse_json and parse_ordered_json build the value
// themselves from the parser's events, in time linear in the input: duplicate keys are found
// with a hash set per open object, ordered objects are appended to in document order. They
// refuse a BOM (as Python's json.loads does), nesting deeper than max_depth, duplicate keys,
// and objects or arrays over the size limits, stopping at the first violation; they never throw.
#pragma once

#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>

#include "common/status.h"

namespace s4kv {

using Json = nlohmann::json;
// Keeps object keys in document order (requests whose key order is visible, e.g. tool schemas
// rendered by a chat template's tojson, and reports printed in a fixed order). Lookups by key
// (find, operator[], at) scan the object; parse_ordered_json bounds its size.
using OrderedJson = nlohmann::ordered_json;

// A tighter element limit for the array under one key of the top-level object.
struct JsonFieldLimit {
  std::string_view key;  // "messages"
  size_t max_elements = 0;
};

struct JsonLimits {
  int max_depth = 64;  // nesting of arrays and objects
  bool allow_duplicate_keys = false;
  size_t max_object_keys = 0;                    // keys of one object; 0: no limit
  size_t max_array_elements = 0;                 // elements of one array; 0: no limit
  std::span<const JsonFieldLimit> field_limits;  // must outlive the parse
};

// Where a limit was violated, for error messages that name a field.
struct JsonViolation {
  // The value's path from the top: "logit_bias", "messages[3].content", "" for the top
  // level itself or a syntax error.
  std::string path;
  // The path's first object key ("logit_bias", "messages"); empty when the path starts with
  // an array index or is empty.
  std::string top_level_key;
};

// Parses text. `source` names the input in error messages (a path, "request body" ...).
// `violation`, when given, is filled on a limit violation (not on a syntax error).
Result<Json> parse_json(std::string_view text, std::string_view source, JsonLimits limits = {},
                        JsonViolation* violation = nullptr);

// parse_json keeping object keys in document order.
Result<OrderedJson> parse_ordered_json(std::string_view text, std::string_view source,
                                       JsonLimits limits = {}, JsonViolation* violation = nullptr);

// Reads a whole file (refusing files over max_bytes) and parses it.
Result<Json> read_json_file(const std::string& path, size_t max_bytes = 64u << 20,
                            JsonLimits limits = {});

// Short rendering of a JSON value for error messages ("foo", 12, [..], {..}); at most ~80 chars.
std::string json_brief(const Json& v);

// Name of the JSON type for error messages: "string", "integer", "number", "boolean", ...
std::string_view json_type_name(const Json& v);

}  // namespace s4kv
