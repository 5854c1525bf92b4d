// JSON in and out of the value model. In: request data (messages, tools) keeps its key order,
// as Python's json.loads does, so parse with OrderedJson. Out: tojson as transformers defines
// it, i.e. Python's json.dumps (ensure_ascii=False by default, optional indent and separators,
// sort_keys=False), byte for byte, including float formatting.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "common/json.h"
#include "common/status.h"
#include "tokenizer/jinja/value.h"

namespace s4kv::tokenizer::jinja {

Value from_json(const OrderedJson& j);
Value from_json(const Json& j);  // keys come sorted (std::map); prefer OrderedJson

struct JsonDumpOptions {
  std::optional<std::string> indent;  // nullopt: one line; else the per-level indent string
  std::optional<std::pair<std::string, std::string>> separators;  // (item, key)
  bool sort_keys = false;
  bool ensure_ascii = false;
};

// Python's json.dumps(value, ...). Throws TemplateError for values JSON cannot hold
// (Undefined, functions, namespaces), as json.dumps raises TypeError.
std::string dump_json(const Value& v, const JsonDumpOptions& options);

}  // namespace s4kv::tokenizer::jinja
