// libFuzzer target for the bounded JSON parser (common/json.h) that every request body,
// config.json and safetensors header goes through: any bytes give either a Status with a
// message or a document within the depth limit that survives dump -> parse unchanged (the
// dump must not throw: parsed strings are valid UTF-8).
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/check.h"
#include "common/json.h"
#include "fuzz_support.h"

namespace {

int depth_of(const s4kv::OrderedJson& j) {
  int d = 0;
  if (j.is_array() || j.is_object()) {
    for (const auto& v : j) d = std::max(d, depth_of(v));
    return d + 1;
  }
  return 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = s4kv::fuzz::as_text(data, size);
  constexpr int kDepth = 16;  // small, so that the fuzzer reaches the limit
  auto ordered = s4kv::parse_ordered_json(text, "fuzz", s4kv::JsonLimits{.max_depth = kDepth});
  auto plain = s4kv::parse_json(text, "fuzz", s4kv::JsonLimits{.max_depth = kDepth});
  S4KV_CHECK(ordered.is_ok() == plain.is_ok(), "ordered and plain parses disagree");
  if (!ordered.is_ok()) {
    S4KV_CHECK(!ordered.status().message().empty());
    return 0;
  }
  S4KV_CHECK(depth_of(*ordered) <= kDepth, "document deeper than the limit accepted");
  const std::string dumped = ordered->dump();
  auto again = s4kv::parse_ordered_json(dumped, "dump", s4kv::JsonLimits{.max_depth = kDepth});
  S4KV_CHECK(again.is_ok(), "dump of a parsed document does not parse: ", again.status().message());
  S4KV_CHECK(*again == *ordered, "dump -> parse changed the document");
  S4KV_CHECK(s4kv::Json(*ordered) == *plain, "ordered and plain documents differ");
  S4KV_CHECK(s4kv::json_brief(*plain).size() <= 120, "json_brief too long");
  (void)s4kv::json_type_name(*plain);
  // Duplicate keys allowed: the last one wins, as nlohmann does; must not fail otherwise.
  auto dup = s4kv::parse_json(text, "fuzz", {.max_depth = kDepth, .allow_duplicate_keys = true});
  S4KV_CHECK(dup.is_ok(), "allowing duplicate keys refused a valid document");
  return 0;
}
