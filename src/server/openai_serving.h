// OpenAiServing: POST /v1/chat/completions and POST /v1/completions. For one request: read
// the fields (openai_protocol.h) -> render the chat template (chat) -> tokenize -> check
// lengths -> submit to the AsyncEngine (one engine request per prompt; n sequences each) ->
// answer through the HttpExchange, as one JSON body or as SSE chunks ending in
// "data: [DONE]". A client that disconnects aborts its engine requests. The two routes run
// on any thread (ApiServer calls them on its worker pool: parsing, rendering and tokenizing
// are the CPU-heavy part of a request); the run is started on the exchange's strand (posted),
// where its events are handled. Never touches engine state.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/json.h"
#include "server/async_engine.h"
#include "server/http_server.h"
#include "server/openai_protocol.h"
#include "server/openai_run.h"
#include "tokenizer/chat_template.h"

namespace s4kv::server {

class OpenAiServing {
 public:
  // served_model_names: the names requests may use in "model" (the first is reported in
  // responses); chat_template: null when the model has none (chat requests get a 400).
  // Both the engine and the template must outlive this.
  OpenAiServing(AsyncEngine& engine, const tokenizer::ChatTemplate* chat_template,
                std::vector<std::string> served_model_names);

  // `body` is the parsed request (bounded depth, checked by the caller); authentication is
  // done. Each answers exactly once through `exchange` (an error, a JSON body or a stream).
  void chat_completions(const OrderedJson& body, std::shared_ptr<HttpExchange> exchange);
  void completions(const OrderedJson& body, std::shared_ptr<HttpExchange> exchange);

  // What request parsing knows of the model (names, sizes, generation defaults).
  const ModelContext& model_context() const { return model_; }

 private:
  AsyncEngine& engine_;
  const tokenizer::ChatTemplate* chat_template_;
  ModelContext model_;  // holds the served model names
};

}  // namespace s4kv::server
