#include "server/api_server.h"

#include <chrono>
#include <exception>
#include <utility>

#include "common/log.h"
#include "server/openai_protocol.h"

namespace s4kv::server {
namespace {

constexpr size_t kMaxTokenizeTokens = 1u << 20;

struct Route {
  std::string_view path;
  std::string_view method;
};

// Every route the server has, for 404 vs 405 (with Allow).
constexpr Route kRoutes[] = {
    {"/v1/chat/completions", "POST"},
    {"/v1/completions", "POST"},
    {"/v1/models", "GET"},
    {"/health", "GET"},
    {"/metrics", "GET"},
    {"/version", "GET"},
    {"/tokenize", "POST"},
    {"/detokenize", "POST"},
    // Amazon SageMaker's container contract, as vllm serve has it.
    {"/ping", "GET"},
    {"/ping", "POST"},
    {"/invocations", "POST"},
};

// Compares without an early exit, so the time taken does not reveal how much of a guess
// was right (only its length).
bool constant_time_equal(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  }
  return diff == 0;
}

std::optional<bool> optional_bool(const OrderedJson& body, const char* name, ApiError& error) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) {
    error = bad_request(
        std::string(name) + " must be a boolean, got " + std::string(json_type_name(Json(*it))),
        name);
    return std::nullopt;
  }
  return it->get<bool>();
}

}  // namespace

HttpResponse error_response(const ApiError& error) {
  HttpResponse r;
  r.status = error.status;
  r.headers = error.headers;
  r.body = error_body(error);
  r.close = error.close;
  return r;
}

HttpResponse json_response(const OrderedJson& body, int status) {
  HttpResponse r;
  r.status = status;
  r.body = body.dump(-1, ' ', /*ensure_ascii=*/false, OrderedJson::error_handler_t::replace);
  return r;
}

ApiServer::ApiServer(ApiServerOptions options)
    : options_(std::move(options)), cors_(options_.cors) {
  S4KV_CHECK(!options_.served_model_names.empty(), "ApiServer: no served model name");
  pool_ = std::make_unique<WorkPool>(options_.num_request_workers, options_.max_queued_work);
  created_ = std::chrono::duration_cast<std::chrono::seconds>(
                 std::chrono::system_clock::now().time_since_epoch())
                 .count();
}

void ApiServer::set_engine(AsyncEngine& engine, Metrics& metrics,
                           const tokenizer::ChatTemplate* chat_template) {
  auto s = std::make_shared<Serving>();
  s->engine = &engine;
  s->metrics = &metrics;
  s->chat_template = chat_template;
  s->openai = std::make_unique<OpenAiServing>(engine, chat_template, options_.served_model_names);
  std::lock_guard<std::mutex> lock(mu_);
  serving_ = std::move(s);
}

void ApiServer::set_draining() {
  draining_.store(true);
  pool_->drain();
}

std::shared_ptr<const ApiServer::Serving> ApiServer::serving() const {
  std::lock_guard<std::mutex> lock(mu_);
  return serving_;
}

bool ApiServer::authorized(const HttpRequest& request) const {
  if (options_.api_key.empty()) return true;
  const std::optional<std::string_view> auth = request.header("authorization");
  constexpr std::string_view kBearer = "Bearer ";
  if (!auth || auth->substr(0, kBearer.size()) != kBearer) return false;
  return constant_time_equal(auth->substr(kBearer.size()), options_.api_key);
}

void ApiServer::handle(HttpRequest request, std::shared_ptr<HttpExchange> exchange) {
  if (std::optional<HttpResponse> answer = cors_.preflight(request)) {
    exchange->respond(std::move(*answer));
    return;
  }
  if (Headers cors = cors_.response_headers(request); !cors.empty()) {
    exchange = with_extra_headers(std::move(exchange), std::move(cors));
  }
  try {
    route(request, exchange);
  } catch (const std::exception& e) {
    // Last resort: a bug in a handler answers 500 and the server goes on.
    log_error("api", "unhandled error on " + request.method + " " + request.path + ": " + e.what());
    exchange->respond(error_response(api_error(500, "internal server error")));
  }
}

void ApiServer::route(HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange) {
  // HEAD is answered as GET; the HTTP layer sends the response without its body.
  const std::string_view method =
      request.method == "HEAD" ? std::string_view("GET") : std::string_view(request.method);
  std::string allow;
  bool path_known = false;
  bool method_allowed = false;
  for (const Route& r : kRoutes) {
    if (r.path != request.path) continue;
    path_known = true;
    method_allowed = method_allowed || r.method == method;
    allow += (allow.empty() ? "" : ", ") + std::string(r.method);
    if (r.method == "GET") allow += ", HEAD";
  }
  if (!path_known) {
    exchange->respond(error_response(api_error(404, "no route for " + request.path)));
    return;
  }
  if (request.path == "/health") {
    exchange->respond(method == "GET" ? health() : [&] {
      ApiError e = api_error(405, "method " + request.method + " not allowed on /health");
      e.headers.emplace_back("Allow", allow);
      return error_response(e);
    }());
    return;
  }
  if (!authorized(request)) {
    exchange->respond(
        error_response(api_error(401, "invalid or missing API key (Authorization: Bearer <key>)")));
    return;
  }
  if (!method_allowed) {
    ApiError e = api_error(405, "method " + request.method + " not allowed on " + request.path);
    e.headers.emplace_back("Allow", allow);
    exchange->respond(error_response(e));
    return;
  }
  if (request.path == "/ping") {  // SageMaker's health check: /health's answer
    exchange->respond(health());
    return;
  }
  if (request.path == "/version") {
    exchange->respond(json_response({{"version", options_.version}}));
    return;
  }
  const std::shared_ptr<const Serving> s = serving();
  if (!s) {
    exchange->respond(error_response(api_error(503, "the model is loading")));
    return;
  }
  if (request.path == "/metrics") {
    HttpResponse r;
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    r.body = s->metrics->render();
    exchange->respond(std::move(r));
    return;
  }
  if (request.path == "/v1/models") {
    exchange->respond(models(*s));
    return;
  }
  // The rest take a JSON object body, handled on the worker pool.
  const bool queued =
      pool_->try_post([this, s, path = request.path, text = std::move(request.body), exchange] {
        try {
          serve_body(*s, path, text, exchange);
        } catch (const std::exception& e) {  // last resort, as in handle()
          log_error("api", "unhandled error on POST " + path + ": " + e.what());
          exchange->respond(error_response(api_error(500, "internal server error")));
        }
      });
  if (!queued) {
    if (draining_.load()) {
      ApiError e = api_error(503, "the server is shutting down");
      e.close = true;
      exchange->respond(error_response(e));
      return;
    }
    ApiError e =
        api_error(503, "the server is busy preparing " + std::to_string(options_.max_queued_work) +
                           " other requests; retry later");
    e.headers.emplace_back("Retry-After", "1");
    exchange->respond(error_response(e));
  }
}

void ApiServer::serve_body(const Serving& s, std::string_view path, const std::string& text,
                           const std::shared_ptr<HttpExchange>& exchange) const {
  JsonViolation where;
  auto body = parse_ordered_json(text, "request body", kRequestJsonLimits, &where);
  if (!body.is_ok()) {
    std::optional<std::string> param;
    if (!where.top_level_key.empty()) param = where.top_level_key;
    exchange->respond(error_response(bad_request(body.status().message(), std::move(param))));
    return;
  }
  if (!body->is_object()) {
    exchange->respond(error_response(bad_request("the request body must be a JSON object")));
    return;
  }
  if (path == "/invocations") {  // SageMaker: chat when the body has messages, else completions
    if (body->contains("messages")) {
      path = "/v1/chat/completions";
    } else if (body->contains("prompt")) {
      path = "/v1/completions";
    } else {
      exchange->respond(error_response(bad_request(
          "/invocations needs \"messages\" (chat completions) or \"prompt\" (completions)")));
      return;
    }
  }
  if (path == "/v1/chat/completions") {
    s.openai->chat_completions(*body, exchange);
  } else if (path == "/v1/completions") {
    s.openai->completions(*body, exchange);
  } else if (path == "/tokenize") {
    exchange->respond(tokenize(s, *body));
  } else {
    exchange->respond(detokenize(s, *body));
  }
}

HttpResponse ApiServer::health() const {
  const std::shared_ptr<const Serving> s = serving();
  HttpResponse r;
  r.content_type.clear();
  const bool draining = draining_.load();
  r.status = s && !draining && s->engine->healthy() ? 200 : 503;
  r.close = draining;  // the drain's 503 closes the connection, as every answer after it
  return r;
}

HttpResponse ApiServer::models(const Serving& s) const {
  OrderedJson data = OrderedJson::array();
  for (const std::string& name : options_.served_model_names) {
    data.push_back({{"id", name},
                    {"object", "model"},
                    {"created", created_},
                    {"owned_by", "s4kv"},
                    {"root", s.engine->model_dir()},
                    {"parent", nullptr},
                    {"max_model_len", s.engine->max_model_len()}});
  }
  return json_response({{"object", "list"}, {"data", std::move(data)}});
}

std::unique_ptr<ApiError> ApiServer::check_model(const OrderedJson& body) const {
  auto it = body.find("model");
  if (it == body.end() || it->is_null()) return nullptr;
  if (it->is_string()) {
    for (const std::string& name : options_.served_model_names) {
      if (name == it->get_ref<const std::string&>()) return nullptr;
    }
  }
  const std::string name = it->is_string() ? it->get<std::string>() : json_brief(Json(*it));
  return std::make_unique<ApiError>(
      api_error(404, "The model `" + name + "` does not exist.", "model", "model_not_found"));
}

// vLLM's /tokenize: {"prompt", "add_special_tokens" (default true)} or {"messages",
// "add_generation_prompt" (true), "continue_final_message", "add_special_tokens" (false),
// "tools", "chat_template_kwargs"}; both may ask "return_token_strs". Answers {"count",
// "max_model_len", "tokens", "token_strs"}.
HttpResponse ApiServer::tokenize(const Serving& s, const OrderedJson& body) const {
  if (auto e = check_model(body)) return error_response(*e);
  ApiError error;
  const bool chat = body.contains("messages");
  const std::optional<bool> add_special = optional_bool(body, "add_special_tokens", error);
  const std::optional<bool> want_strs = optional_bool(body, "return_token_strs", error);
  const std::optional<bool> add_generation = optional_bool(body, "add_generation_prompt", error);
  if (!error.message.empty()) return error_response(error);
  std::string text;
  if (chat) {
    if (s.chat_template == nullptr) {
      return error_response(bad_request("this model has no chat template", "messages"));
    }
    std::optional<OrderedJson> messages = normalize_chat_messages(body["messages"], error);
    if (!messages) return error_response(error);
    OrderedJson tools = body.value("tools", OrderedJson());
    if (!tools.is_null() && !tools.is_array()) {
      return error_response(bad_request("tools must be an array", "tools"));
    }
    OrderedJson extra = body.value("chat_template_kwargs", OrderedJson::object());
    if (!extra.is_object()) {
      return error_response(
          bad_request("chat_template_kwargs must be an object", "chat_template_kwargs"));
    }
    auto rendered = s.chat_template->render(*messages, tools, add_generation.value_or(true), extra);
    if (!rendered.is_ok()) return error_response(from_status(rendered.status(), "messages"));
    text = std::move(rendered).value();
  } else {
    auto it = body.find("prompt");
    if (it == body.end() || !it->is_string()) {
      return error_response(bad_request("prompt (a string) or messages is required", "prompt"));
    }
    text = it->get<std::string>();
  }
  auto ids = s.engine->tokenizer().encode(text, add_special.value_or(!chat));
  if (!ids.is_ok()) return error_response(from_status(ids.status(), chat ? "messages" : "prompt"));
  if (ids->size() > kMaxTokenizeTokens) {
    return error_response(bad_request("the text is too long to tokenize", "prompt"));
  }
  OrderedJson out = {{"count", ids->size()},
                     {"max_model_len", s.engine->max_model_len()},
                     {"tokens", *ids},
                     {"token_strs", nullptr}};
  if (want_strs.value_or(false)) {
    OrderedJson strs = OrderedJson::array();
    for (int32_t id : *ids) {
      strs.push_back(std::string(s.engine->tokenizer().id_to_token(id).value_or("")));
    }
    out["token_strs"] = std::move(strs);
  }
  return json_response(out);
}

// vLLM's /detokenize: {"tokens": [ids]} -> {"prompt": text}.
HttpResponse ApiServer::detokenize(const Serving& s, const OrderedJson& body) const {
  if (auto e = check_model(body)) return error_response(*e);
  auto it = body.find("tokens");
  if (it == body.end() || !it->is_array()) {
    return error_response(bad_request("tokens must be an array of token ids", "tokens"));
  }
  const tokenizer::Tokenizer& tok = s.engine->tokenizer();
  std::vector<int32_t> ids;
  ids.reserve(it->size());
  for (const OrderedJson& v : *it) {
    const bool in_range = v.is_number_integer() && v.get<int64_t>() >= 0 &&
                          v.get<int64_t>() < tok.vocab_size() &&
                          tok.id_to_token(static_cast<int32_t>(v.get<int64_t>())).has_value();
    if (!in_range) {
      return error_response(bad_request("tokens: " + json_brief(Json(v)) +
                                            " is not a token id of this model (0.." +
                                            std::to_string(tok.vocab_size() - 1) + ")",
                                        "tokens"));
    }
    ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  return json_response({{"prompt", tok.decode(ids, /*skip_special_tokens=*/false)}});
}

}  // namespace s4kv::server
