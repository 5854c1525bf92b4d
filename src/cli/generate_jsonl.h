// `s4kv generate --jsonl`: one request per stdin line, as a JSON object with vLLM's sampling
// field names: {"prompt": "..."} or {"messages": [...]} and optionally max_tokens,
// temperature, top_p, top_k, min_p, seed, stop (a string or a list), stop_token_ids, n,
// min_tokens, ignore_eos, presence_penalty, frequency_penalty, repetition_penalty,
// include_stop_str_in_output, skip_special_tokens. Unknown fields and wrong types are
// refused naming the field; ranges are checked later by SamplingParams::validate.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "common/json.h"
#include "common/status.h"
#include "engine/sampling_params.h"

namespace s4kv::cli {

struct JsonlRequest {
  std::optional<std::string> prompt;    // plain completion prompt
  std::optional<OrderedJson> messages;  // or a conversation for the chat template
  engine::SamplingParams params;        // the line's fields over the command line's defaults
};

// Parses one line. `defaults` carries the command line's sampling flags.
Result<JsonlRequest> parse_jsonl_request(std::string_view line,
                                         const engine::SamplingParams& defaults);

}  // namespace s4kv::cli
