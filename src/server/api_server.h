// ApiServer: the routes of the OpenAI-compatible API and everything around the two generation
// endpoints: CORS (cors.h), API-key authentication, routing (404 unknown path, 405 wrong method),
// request body parsing with a nesting limit, GET /health, /metrics, /v1/models, /version, and POST
// /tokenize, /detokenize with vLLM's shapes. Chat and completions go to OpenAiServing.
// SageMaker's routes as vLLM has them: GET|POST /ping answers as /health (behind the API key
// when one is set, like every route but /health); POST /invocations is chat completions when
// the body has "messages", completions when it has "prompt".
//
// Life cycle: constructed before the model loads (every route but /health and /version
// answers 503 while loading), set_engine() once the engine runs, set_draining() at shutdown
// (/health 503). handle() runs on the HTTP I/O threads, many at once; the state it reads is
// published once under a mutex and immutable after. The routes with a JSON body (chat,
// completions, /tokenize, /detokenize, /invocations) are parsed, checked, rendered and
// tokenized on a bounded worker pool (work_pool.h), so the I/O threads stay free for /health,
// /metrics and streams; when its queue is full the request gets 503 with Retry-After at once.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/json.h"
#include "server/api_error.h"
#include "server/async_engine.h"
#include "server/cors.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/openai_serving.h"
#include "server/work_pool.h"
#include "tokenizer/chat_template.h"

namespace s4kv::server {

struct ApiServerOptions {
  std::vector<std::string> served_model_names;  // non-empty; the first is the primary name
  std::string api_key;                          // empty: no authentication
  std::string version;                          // GET /version
  CorsOptions cors;                             // vLLM's defaults: every origin
  int num_request_workers = 4;                  // the worker pool's threads
  size_t max_queued_work = 64;                  // requests waiting for a worker; over: 503
};

class ApiServer {
 public:
  explicit ApiServer(ApiServerOptions options);

  // The engine is running: from now on requests are served. All three must outlive this;
  // chat_template may be null (chat requests then get a 400).
  void set_engine(AsyncEngine& engine, Metrics& metrics,
                  const tokenizer::ChatTemplate* chat_template);
  // Shutdown began: /health answers 503; requests with a body are refused (503), and this
  // returns once those already on the worker pool have been handed on (answered, or their
  // run posted to their strand, where a draining engine refuses it), so that no worker
  // touches the engine or the chat template after the caller has destroyed them.
  void set_draining();

  // The HttpHandler.
  void handle(HttpRequest request, std::shared_ptr<HttpExchange> exchange);

 private:
  struct Serving {
    AsyncEngine* engine = nullptr;
    Metrics* metrics = nullptr;
    const tokenizer::ChatTemplate* chat_template = nullptr;
    std::unique_ptr<OpenAiServing> openai;
  };

  bool authorized(const HttpRequest& request) const;
  std::shared_ptr<const Serving> serving() const;
  void route(HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange);
  // On the worker pool: the JSON body of a POST route, parsed and served.
  void serve_body(const Serving& s, std::string_view path, const std::string& text,
                  const std::shared_ptr<HttpExchange>& exchange) const;

  HttpResponse health() const;
  HttpResponse models(const Serving& s) const;
  HttpResponse tokenize(const Serving& s, const OrderedJson& body) const;
  HttpResponse detokenize(const Serving& s, const OrderedJson& body) const;
  // 404 when the body names a model this server does not serve; nullptr otherwise.
  std::unique_ptr<ApiError> check_model(const OrderedJson& body) const;

  ApiServerOptions options_;
  CorsPolicy cors_;
  int64_t created_ = 0;  // unix time of start-up, reported by /v1/models
  mutable std::mutex mu_;
  std::shared_ptr<const Serving> serving_;  // null while loading
  std::atomic<bool> draining_{false};
  std::unique_ptr<WorkPool> pool_;
};

// An ApiError as an HttpResponse (its status, extra headers and error_body).
HttpResponse error_response(const ApiError& error);
// A JSON body (ordered, invalid UTF-8 replaced) as a 200 response.
HttpResponse json_response(const OrderedJson& body, int status = 200);

}  // namespace s4kv::server
