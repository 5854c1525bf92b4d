// libFuzzer target for POST /v1/chat/completions up to the engine: the body parsed as the
// server parses it (depth limit 64), read into a ChatRequest, messages rendered through the
// bundled model's chat template and tokenized, max_tokens resolved and the sampling params
// validated. Every refusal must be an ApiError with a message whose JSON body renders; an
// accepted request must give token ids inside the vocabulary and valid params.
#include <cstddef>
#include <cstdint>

#include "common/check.h"
#include "common/json.h"
#include "fuzz_support.h"
#include "server/api_error.h"
#include "server/openai_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace server = s4kv::server;
  const auto& model = s4kv::fuzz::bundled_model_context();
  auto body = s4kv::fuzz::request_body(data, size);
  if (!body) return 0;
  server::ApiError error;
  auto request = server::parse_chat_request(*body, model, error);
  if (!request) return s4kv::fuzz::refuse(error);
  S4KV_CHECK(request->messages.is_array());
  auto ids = server::chat_prompt_ids(*request, s4kv::fuzz::bundled_chat_template(),
                                     s4kv::fuzz::bundled_tokenizer(), error);
  if (!ids) return s4kv::fuzz::refuse(error);
  for (int32_t id : *ids) S4KV_CHECK(id >= 0 && id < model.vocab_size, "token id ", id);
  auto max_tokens = server::resolve_request_max_tokens(
      request->params, std::nullopt, static_cast<int64_t>(ids->size()), model, "messages", error);
  if (!max_tokens) return s4kv::fuzz::refuse(error);
  S4KV_CHECK(
      *max_tokens >= 1 && *max_tokens + static_cast<int64_t>(ids->size()) <= model.max_model_len,
      "max_tokens ", *max_tokens, " with ", ids->size(), " prompt tokens");
  auto params = request->params;
  params.max_tokens = *max_tokens;
  const s4kv::Status s = params.validate(model.vocab_size, model.max_model_len);
  if (!s.is_ok()) return s4kv::fuzz::refuse(server::bad_request(s.message()));
  return 0;
}
