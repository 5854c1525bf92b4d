// ApiServer before the engine is set (the loading state): authentication, routing (404, 405
// with Allow), /health 503, /version, and that model routes answer 503 while loading. With
// the tiny model's engine: bodies are answered from the worker pool (limits refused naming the
// field, a BOM refused), and a full pool answers 503 with Retry-After at once. The routes'
// answers are covered end to end (test_*.py, a real `s4kv serve`).
#include "server/api_server.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "common/json.h"

namespace s4kv::server {
namespace {

// Records the one response; everything runs inline.
class FakeExchange : public HttpExchange {
 public:
  void respond(HttpResponse r) override { response = std::move(r); }
  void begin_stream(int, std::string, Headers) override { ADD_FAILURE() << "unexpected stream"; }
  void write(std::string) override {}
  void end_stream() override {}
  void post(std::function<void()> fn) override { fn(); }
  void on_disconnect(std::function<void()>) override {}
  bool disconnected() const override { return false; }

  std::optional<HttpResponse> response;
};

HttpResponse call(ApiServer& api, std::string method, std::string path,
                  std::optional<std::string> auth = std::nullopt) {
  HttpRequest r;
  r.method = std::move(method);
  r.target = path;
  r.path = std::move(path);
  if (auth) r.headers.emplace_back("authorization", *auth);
  auto ex = std::make_shared<FakeExchange>();
  api.handle(r, ex);
  EXPECT_TRUE(ex->response.has_value());
  return ex->response.value_or(HttpResponse{});
}

std::optional<std::string> header(const HttpResponse& r, const std::string& name) {
  for (const auto& [k, v] : r.headers)
    if (k == name) return v;
  return std::nullopt;
}

Json error_of(const HttpResponse& r) {
  auto j = parse_json(r.body, "response");
  EXPECT_TRUE(j.is_ok()) << r.body;
  return j.is_ok() ? (*j)["error"] : Json();
}

TEST(ApiServerTest, HealthNeedsNoKeyAndIs503WhileLoading) {
  ApiServer api({{"tiny"}, "secret", "0.1.0"});
  const HttpResponse r = call(api, "GET", "/health");
  EXPECT_EQ(r.status, 503);
  EXPECT_TRUE(r.body.empty());
}

TEST(ApiServerTest, EveryOtherRouteNeedsTheKey) {
  ApiServer api({{"tiny"}, "secret", "0.1.0"});
  for (const char* path : {"/version", "/v1/models", "/metrics"}) {
    EXPECT_EQ(call(api, "GET", path).status, 401) << path;
    EXPECT_EQ(call(api, "GET", path, "Bearer wrong").status, 401) << path;
    EXPECT_EQ(call(api, "GET", path, "Bearer secretX").status, 401) << path;
    EXPECT_EQ(call(api, "GET", path, "Bearer secre").status, 401) << path;
    EXPECT_EQ(call(api, "GET", path, "secret").status, 401) << path;
  }
  const HttpResponse r = call(api, "POST", "/v1/chat/completions", "Bearer nope");
  EXPECT_EQ(r.status, 401);
  const Json e = error_of(r);
  EXPECT_EQ(e["type"], "AuthenticationError");
  EXPECT_EQ(e["code"], 401);
  EXPECT_TRUE(e["param"].is_null());
}

TEST(ApiServerTest, VersionAnswersWhileLoading) {
  ApiServer api({{"tiny"}, "secret", "0.1.0"});
  const HttpResponse r = call(api, "GET", "/version", "Bearer secret");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, R"({"version":"0.1.0"})");
}

TEST(ApiServerTest, ModelRoutesAre503WhileLoading) {
  ApiServer api({{"tiny"}, "", "0.1.0"});
  EXPECT_EQ(call(api, "GET", "/v1/models").status, 503);
  EXPECT_EQ(call(api, "GET", "/metrics").status, 503);
  const HttpResponse r = call(api, "POST", "/v1/completions");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(error_of(r)["type"], "ServiceUnavailableError");
}

TEST(ApiServerTest, UnknownPathIs404AndWrongMethodIs405WithAllow) {
  ApiServer api({{"tiny"}, "", "0.1.0"});
  const HttpResponse missing = call(api, "GET", "/v1/nothing");
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(error_of(missing)["type"], "NotFoundError");
  const HttpResponse wrong = call(api, "GET", "/v1/chat/completions");
  EXPECT_EQ(wrong.status, 405);
  EXPECT_EQ(header(wrong, "Allow"), "POST");
  EXPECT_EQ(call(api, "POST", "/health").status, 405);
  EXPECT_EQ(call(api, "DELETE", "/v1/models").status, 405);
  // Methods match whole: a prefix of an allowed one is not allowed.
  EXPECT_EQ(call(api, "GE", "/v1/models").status, 405);
  EXPECT_EQ(call(api, "POS", "/v1/completions").status, 405);
}

TEST(ApiServerTest, SageMakerRoutes) {
  ApiServer open_api({{"tiny"}, "", "0.1.0"});
  EXPECT_EQ(call(open_api, "GET", "/ping").status, 503);  // loading, as /health
  EXPECT_EQ(call(open_api, "POST", "/ping").status, 503);
  EXPECT_EQ(call(open_api, "PUT", "/ping").status, 405);
  EXPECT_EQ(call(open_api, "GET", "/invocations").status, 405);
  EXPECT_EQ(call(open_api, "POST", "/invocations").status, 503);
  ApiServer keyed({{"tiny"}, "secret", "0.1.0"});
  EXPECT_EQ(call(keyed, "GET", "/ping").status, 401);
  EXPECT_EQ(call(keyed, "GET", "/ping", "Bearer secret").status, 503);
  EXPECT_EQ(call(keyed, "POST", "/invocations").status, 401);
}

TEST(ApiServerTest, ErrorResponseCarriesHeadersAndShape) {
  ApiError e = from_status(Status(StatusCode::kResourceExhausted, "queue full"));
  const HttpResponse r = error_response(e);
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(header(r, "Retry-After"), "1");
  EXPECT_EQ(r.body,
            R"({"error":{"message":"queue full","type":"ServiceUnavailableError","param":null,)"
            R"("code":503}})");
  const ApiError c = api_error(400, "too long", "messages", "context_length_exceeded");
  EXPECT_EQ(error_body(c),
            R"({"error":{"message":"too long","type":"BadRequestError","param":"messages",)"
            R"("code":"context_length_exceeded"}})");
  // Invalid UTF-8 in a message never throws.
  EXPECT_NE(error_body(bad_request(std::string("bad \xff byte"))).find("bad"), std::string::npos);
}

TEST(ApiServerTest, HeadIsAnsweredAsGetWhereGetIs) {
  ApiServer api({{"tiny"}, "secret", "0.1.0"});
  // As GET (the HTTP layer drops the body): /health without the key, the others with it.
  EXPECT_EQ(call(api, "HEAD", "/health").status, 503);  // loading, as GET
  const HttpResponse version = call(api, "HEAD", "/version", "Bearer secret");
  EXPECT_EQ(version.status, 200);
  EXPECT_EQ(version.body, call(api, "GET", "/version", "Bearer secret").body);
  EXPECT_EQ(call(api, "HEAD", "/version").status, 401);
  EXPECT_EQ(call(api, "HEAD", "/v1/models", "Bearer secret").status, 503);
  EXPECT_EQ(call(api, "HEAD", "/ping", "Bearer secret").status, 503);
  EXPECT_EQ(call(api, "HEAD", "/nothing", "Bearer secret").status, 404);
  // Not where only POST is; GET routes list HEAD in Allow.
  const HttpResponse post_only = call(api, "HEAD", "/v1/completions", "Bearer secret");
  EXPECT_EQ(post_only.status, 405);
  EXPECT_EQ(header(post_only, "Allow"), "POST");
  const HttpResponse get_only = call(api, "POST", "/version", "Bearer secret");
  EXPECT_EQ(get_only.status, 405);
  EXPECT_EQ(header(get_only, "Allow"), "GET, HEAD");
  EXPECT_EQ(header(call(api, "PUT", "/health"), "Allow"), "GET, HEAD");
  EXPECT_EQ(header(call(api, "PUT", "/ping", "Bearer secret"), "Allow"), "GET, HEAD, POST");
}

// Records the one response, from whichever thread gives it; posted functions run inline.
class ThreadedExchange : public HttpExchange {
 public:
  void respond(HttpResponse r) override {
    std::lock_guard<std::mutex> lock(mu_);
    response_ = std::move(r);
    responder_ = std::this_thread::get_id();
    cv_.notify_all();
  }
  void begin_stream(int, std::string, Headers) override { ADD_FAILURE() << "unexpected stream"; }
  void write(std::string) override {}
  void end_stream() override {}
  void post(std::function<void()> fn) override { fn(); }
  void on_disconnect(std::function<void()>) override {}
  bool disconnected() const override { return false; }

  // The response once given (a default one after 60 s), and whether it came off this thread.
  std::pair<HttpResponse, bool> wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(60), [this] { return response_.has_value(); });
    EXPECT_TRUE(response_.has_value());
    return {response_.value_or(HttpResponse{}), responder_ != std::this_thread::get_id()};
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<HttpResponse> response_;
  std::thread::id responder_;
};

class ServingApiServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    engine::EngineArgs a;
    a.model = "models/s4kv-tiny";
    a.config.kv_cache_memory_bytes = int64_t{128} << 20;
    a.config.max_model_len = 256;
    auto e = engine::load_llm_engine(a);
    ASSERT_TRUE(e.is_ok()) << e.status().message();
    metrics_ = std::make_unique<Metrics>("tiny", kv_capacity_info(*e), 256);
    engine_ = std::make_unique<AsyncEngine>(std::move(e).value(), AsyncEngineOptions{}, *metrics_);
  }
  void TearDown() override {
    if (engine_) engine_->shutdown(std::chrono::steady_clock::now());
  }
  std::pair<HttpResponse, bool> post(ApiServer& api, const std::string& path, std::string body) {
    HttpRequest r;
    r.method = "POST";
    r.target = path;
    r.path = path;
    r.body = std::move(body);
    auto ex = std::make_shared<ThreadedExchange>();
    api.handle(r, ex);
    return ex->wait();
  }

  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<AsyncEngine> engine_;
};

TEST_F(ServingApiServerTest, BodiesAreHandledOnTheWorkerPoolWithTheirLimits) {
  ApiServer api({{"tiny"}, "", "0.1.0"});
  api.set_engine(*engine_, *metrics_, nullptr);
  const auto [ok, ok_off_thread] = post(api, "/tokenize", R"({"prompt": "Hello"})");
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_TRUE(ok_off_thread);  // answered by a worker, not the calling (I/O) thread
  std::string keys = R"({"prompt": "x", "ignored": {)";
  for (int i = 0; i < 100000; ++i) keys += (i ? ",\"" : "\"") + std::to_string(i) + "\":1";
  const auto [many, many_off_thread] = post(api, "/v1/completions", keys + "}}");
  EXPECT_EQ(many.status, 400);
  EXPECT_EQ(error_of(many)["param"], "ignored");
  EXPECT_NE(error_of(many)["message"].get<std::string>().find("more than 1024 keys"),
            std::string::npos);
  EXPECT_TRUE(many_off_thread);
  const auto [bom, bom_off_thread] =
      post(api, "/v1/completions", "\xEF\xBB\xBF{\"prompt\": \"x\"}");
  EXPECT_EQ(bom.status, 400);
  EXPECT_NE(error_of(bom)["message"].get<std::string>().find("byte order mark"), std::string::npos);
  const auto [echo, echo_off_thread] =
      post(api, "/v1/chat/completions", R"({"messages": [{"role": "user", "content": "Hi"}],
                                           "echo": "yes"})");
  EXPECT_EQ(echo.status, 400);
  EXPECT_EQ(error_of(echo)["param"], "echo");
}

TEST_F(ServingApiServerTest, FullPoolAnswers503WithRetryAfterAtOnce) {
  ApiServerOptions options{{"tiny"}, "", "0.1.0"};
  options.num_request_workers = 1;
  options.max_queued_work = 0;  // no room: every body request finds the queue full
  ApiServer api(options);
  api.set_engine(*engine_, *metrics_, nullptr);
  const auto [r, off_thread] = post(api, "/v1/completions", R"({"prompt": "Hello"})");
  EXPECT_EQ(r.status, 503);
  EXPECT_FALSE(off_thread);  // refused by the calling thread itself, not queued
  EXPECT_EQ(header(r, "Retry-After"), "1");
  EXPECT_EQ(error_of(r)["type"], "ServiceUnavailableError");
  // Routes without a body do not need the pool.
  EXPECT_EQ(call(api, "GET", "/health").status, 200);
  EXPECT_EQ(call(api, "GET", "/v1/models").status, 200);
}

}  // namespace
}  // namespace s4kv::server
