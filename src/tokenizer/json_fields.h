// Non-throwing accessors for tokenizer.json fields: each failure is a Status naming the
// field path ("model.merges[12]") and what was found. Internal to the tokenizer module.
#pragma once

#include <string>
#include <string_view>

#include "common/json.h"
#include "common/status.h"

namespace s4kv::tokenizer {

// The member `key` of object `obj` (at path `where`); an error when obj is not an object or
// the member is missing.
Result<const Json*> json_member(const Json& obj, std::string_view key, std::string_view where);

// Optional members: the default when absent or null, an error when of another type.
Result<bool> json_bool(const Json& obj, std::string_view key, bool dflt, std::string_view where);
Result<std::string> json_string(const Json& obj, std::string_view key, std::string_view dflt,
                                std::string_view where);

// A required string member.
Result<std::string> json_required_string(const Json& obj, std::string_view key,
                                         std::string_view where);

// A non-negative integer id below 2^31.
Result<int32_t> json_id(const Json& v, std::string_view where);

}  // namespace s4kv::tokenizer
