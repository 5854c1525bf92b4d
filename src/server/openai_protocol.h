// The request side of the OpenAI API: POST /v1/chat/completions and /v1/completions bodies
// read into typed requests with vLLM's field names, defaults and refusals, and the prompts
// they make (chat template rendering, tokenization, the context-length check). Every error
// is an ApiError naming the field at fault (param); nothing here throws or touches the
// engine. Stateless functions; any thread.
//
// Invariants of a parsed request: params passed SamplingParams::validate, except that
// max_tokens may still exceed the context (checked against the prompt by
// resolve_request_max_tokens, which then sets it); token ids lie in the vocabulary.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"
#include "engine/generation_config.h"
#include "engine/sampling_params.h"
#include "server/api_error.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace s4kv::server {

// Request limits (docs/server.md, "Limits"), each refused with a 400 naming the field.
// JSON bodies, while parsing (JsonLimits): nesting, keys of one object, elements of one array.
inline constexpr int kMaxBodyDepth = 64;
inline constexpr size_t kMaxObjectKeys = 1024;
inline constexpr size_t kMaxArrayElements = size_t{1} << 20;
// Fields, before any rendering or tokenizing. Messages, stop strings and tools as OpenAI
// limits them; n up to engine::kMaxN (128, OpenAI's).
inline constexpr size_t kMaxMessages = 2048;
inline constexpr size_t kMaxStopStrings = 4;
inline constexpr size_t kMaxStopTokenIds = 1024;
inline constexpr size_t kMaxLogitBias = 1024;
inline constexpr size_t kMaxTools = 128;
// The array limits of fields hold while parsing too, so that a body of 200k messages stops
// being parsed at the 2049th.
inline constexpr JsonFieldLimit kRequestFieldLimits[] = {{"messages", kMaxMessages},
                                                         {"stop", kMaxStopStrings},
                                                         {"stop_token_ids", kMaxStopTokenIds},
                                                         {"tools", kMaxTools}};
inline constexpr JsonLimits kRequestJsonLimits{.max_depth = kMaxBodyDepth,
                                               .allow_duplicate_keys = false,
                                               .max_object_keys = kMaxObjectKeys,
                                               .max_array_elements = kMaxArrayElements,
                                               .field_limits = kRequestFieldLimits};
// Most prompts one completions request may carry (each becomes an engine request); prompts
// x n must also fit --max-queued-requests (OpenAiServing).
inline constexpr size_t kMaxPrompts = 1024;
// OpenAI's (and vLLM's) default max_tokens for /v1/completions; chat's default is the rest
// of the context.
inline constexpr int64_t kDefaultCompletionMaxTokens = 16;

// What parsing needs to know about the served model.
struct ModelContext {
  std::vector<std::string> served_model_names;  // non-empty; the first is reported by default
  int64_t vocab_size = 0;
  int64_t max_model_len = 0;
  engine::GenerationConfig generation_config;  // sampling defaults for unset fields
};

struct StreamOptions {
  bool include_usage = false;           // a last chunk with usage; every chunk "usage": null
  bool continuous_usage_stats = false;  // (with include_usage) usage so far on every chunk
};

struct ChatRequest {
  std::string model;                            // the name responses report
  OrderedJson messages = OrderedJson::array();  // normalize_chat_messages' output
  OrderedJson tools = nullptr;                  // array of tool objects, or null
  OrderedJson chat_template_kwargs = OrderedJson::object();
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  bool add_special_tokens = false;  // the template writes them
  bool stream = false;
  StreamOptions stream_options;
  // Set when "logprobs": true: how many top alternatives per token (top_logprobs, 0..20).
  std::optional<int64_t> top_logprobs;
  engine::SamplingParams params;
};

struct CompletionPrompt {
  std::optional<std::string> text;  // a string prompt (tokenized later); else token_ids
  std::vector<int32_t> token_ids;
};

struct CompletionRequest {
  std::string model;
  std::vector<CompletionPrompt> prompts;  // 1..kMaxPrompts
  bool echo = false;
  bool add_special_tokens = true;
  bool stream = false;
  StreamOptions stream_options;
  engine::SamplingParams params;  // params.logprobs: completions' "logprobs"
};

// A prompt ready for the engine.
struct TokenizedPrompt {
  std::vector<int32_t> token_ids;
  std::string text;  // the prompt as text (for echo): as sent, or decoded from ids
};

// Reads a request body (an object). nullopt with `error` set when a field is refused.
std::optional<ChatRequest> parse_chat_request(const OrderedJson& body, const ModelContext& model,
                                              ApiError& error);
std::optional<CompletionRequest> parse_completion_request(const OrderedJson& body,
                                                          const ModelContext& model,
                                                          ApiError& error);

// Chat messages checked and shaped for ChatTemplate::render: each {"role", "content"
// (string, or null for an assistant message), "name"?, "tool_calls"? (function.arguments
// parsed to JSON), "tool_call_id"?}; text parts joined with "\n". Error param "messages".
std::optional<OrderedJson> normalize_chat_messages(const OrderedJson& messages, ApiError& error);

// Renders the conversation and tokenizes it (continue_final_message cuts the rendering
// after the last message's text, as transformers does). Errors: param "messages".
std::optional<std::vector<int32_t>> chat_prompt_ids(const ChatRequest& request,
                                                    const tokenizer::ChatTemplate& chat_template,
                                                    const tokenizer::Tokenizer& tokenizer,
                                                    ApiError& error);

// Tokenizes string prompts; refuses empty ones. Errors: param "prompt".
std::optional<std::vector<TokenizedPrompt>> completion_prompts(
    const CompletionRequest& request, const tokenizer::Tokenizer& tokenizer, ApiError& error);

// max_tokens for one prompt: the request's value (chat: max_completion_tokens wins, already
// folded into params.max_tokens), else `default_max_tokens` (nullopt: the rest of the
// context) capped by generation_config's max_new_tokens and by what is left of the context.
// Refuses with code "context_length_exceeded" (param `param`) when the prompt plus the
// requested max_tokens exceed max_model_len or the prompt leaves no room.
std::optional<int64_t> resolve_request_max_tokens(const engine::SamplingParams& params,
                                                  std::optional<int64_t> default_max_tokens,
                                                  int64_t num_prompt_tokens,
                                                  const ModelContext& model,
                                                  const std::string& param, ApiError& error);

// "string", "integer", "number", "boolean", "array", "object", "null".
std::string_view json_kind(const OrderedJson& v);

}  // namespace s4kv::server
