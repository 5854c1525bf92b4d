// libFuzzer target for POST /v1/completions up to the engine: the body parsed as the server
// parses it (depth limit 64), read into a CompletionRequest, string prompts tokenized with the
// bundled tokenizer, max_tokens resolved per prompt and the sampling params validated. Every
// refusal must be an ApiError with a message whose JSON body renders; an accepted request must
// give 1..kMaxPrompts prompts of in-vocabulary ids.
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
  auto request = server::parse_completion_request(*body, model, error);
  if (!request) return s4kv::fuzz::refuse(error);
  S4KV_CHECK(!request->prompts.empty() && request->prompts.size() <= server::kMaxPrompts,
             request->prompts.size(), " prompts");
  auto prompts = server::completion_prompts(*request, s4kv::fuzz::bundled_tokenizer(), error);
  if (!prompts) return s4kv::fuzz::refuse(error);
  S4KV_CHECK(prompts->size() == request->prompts.size());
  for (const auto& p : *prompts) {
    S4KV_CHECK(!p.token_ids.empty(), "empty prompt accepted");
    for (int32_t id : p.token_ids) S4KV_CHECK(id >= 0 && id < model.vocab_size, "token id ", id);
    auto max_tokens = server::resolve_request_max_tokens(
        request->params, server::kDefaultCompletionMaxTokens,
        static_cast<int64_t>(p.token_ids.size()), model, "prompt", error);
    if (!max_tokens) return s4kv::fuzz::refuse(error);
    auto params = request->params;
    params.max_tokens = *max_tokens;
    const s4kv::Status s = params.validate(model.vocab_size, model.max_model_len);
    if (!s.is_ok()) return s4kv::fuzz::refuse(server::bad_request(s.message()));
  }
  return 0;
}
