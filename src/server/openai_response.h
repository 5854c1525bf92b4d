// The response side of the OpenAI API: chat.completion and text_completion bodies, their
// streaming chunks, logprobs in both APIs' shapes, usage, and Server-Sent Events framing.
// Pure functions of their inputs (plus the clock and a random source for ids); any thread.
//
// Invariants: logprobs are finite in every body (-inf, and NaN, become -9999.0, as vLLM and
// OpenAI send them); dump_json never throws (invalid UTF-8 in token text is replaced).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "common/json.h"
#include "engine/finish_reason.h"
#include "engine/sampler.h"
#include "server/api_error.h"
#include "tokenizer/tokenizer.h"

namespace s4kv::server {

inline constexpr double kMinLogprob = -9999.0;

// prefix + 32 lower-case hex digits ("chatcmpl-...", "cmpl-...").
std::string make_request_id(std::string_view prefix);

// What every body and chunk of one response repeats.
struct ResponseMeta {
  std::string id;
  int64_t created = 0;  // unix seconds
  std::string model;
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};
OrderedJson usage_json(const Usage& usage);

// How a choice ended.
struct ChoiceFinish {
  engine::FinishReason reason = engine::FinishReason::kStop;
  std::optional<std::string> stop_str;   // stop_reason: the stop string ...
  std::optional<int32_t> stop_token_id;  // ... or the stop token id; else null
};
OrderedJson stop_reason_json(const ChoiceFinish& finish);

// One finished choice of a non-streamed response.
struct ChoiceResult {
  int64_t index = 0;
  std::string text;
  OrderedJson logprobs = nullptr;  // null, or built by the append_* functions below
  ChoiceFinish finish;
};

// A logprob as sent: -inf and NaN as -9999.0; otherwise the float's shortest decimal form.
double clamp_logprob(float logprob);
// A token's text: decode({id}) keeping special tokens.
std::string token_text(const tokenizer::Tokenizer& tokenizer, int32_t id);

// Chat logprobs: appends one {"token", "logprob", "bytes", "top_logprobs": [{"token",
// "logprob", "bytes"} x top_n]} per sampled token to `content` (an array).
void append_chat_logprobs(const tokenizer::Tokenizer& tokenizer,
                          std::span<const engine::SampleOutput> samples, int64_t top_n,
                          OrderedJson& content);
// Completions logprobs: appends to the four arrays of `logprobs` ({"tokens",
// "token_logprobs", "top_logprobs", "text_offset"}; see empty_completion_logprobs). Each
// top_logprobs entry maps token text to logprob: the sampled token first, then the top_n
// most likely. text_offset counts characters (code points) from `text_offset`, advanced.
OrderedJson empty_completion_logprobs();
void append_completion_logprobs(const tokenizer::Tokenizer& tokenizer,
                                std::span<const engine::SampleOutput> samples, int64_t top_n,
                                int64_t& text_offset, OrderedJson& logprobs);
// Characters (UTF-8 code points) in text.
int64_t num_code_points(std::string_view text);

// Whole responses.
OrderedJson chat_completion_response(const ResponseMeta& meta,
                                     std::span<const ChoiceResult> choices, const Usage& usage);
OrderedJson completion_response(const ResponseMeta& meta, std::span<const ChoiceResult> choices,
                                const Usage& usage);

// Streaming chunks. `usage`: nullptr leaves the key out; else its value (null or an object).
OrderedJson chat_chunk(const ResponseMeta& meta, int64_t index, OrderedJson delta,
                       OrderedJson logprobs, const ChoiceFinish* finish, const OrderedJson* usage);
OrderedJson completion_chunk(const ResponseMeta& meta, int64_t index, std::string text,
                             OrderedJson logprobs, const ChoiceFinish* finish,
                             const OrderedJson* usage);
// The last chunk with include_usage: {"id", "object", "created", "model", "choices": [],
// "usage"}. object: "chat.completion.chunk" or "text_completion".
OrderedJson usage_chunk(const ResponseMeta& meta, std::string_view object, const Usage& usage);

// Serialization that never throws: invalid UTF-8 becomes U+FFFD.
std::string dump_json(const OrderedJson& j);
// "data: <json>\n\n".
std::string sse_event(const OrderedJson& j);
// "data: {\"error\": {...}}\n\n".
std::string sse_error(const ApiError& error);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

}  // namespace s4kv::server
