// CorsPolicy with vLLM's defaults (every origin, method and header) and with explicit lists:
// preflight answers and refusals, headers on actual responses, credentials; parse_cors_list;
// with_extra_headers on full responses and streams.
#include "server/cors.h"

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>

namespace s4kv::server {
namespace {

HttpRequest request(std::string method, Headers headers) {
  HttpRequest r;
  r.method = std::move(method);
  r.target = r.path = "/v1/chat/completions";
  r.headers = std::move(headers);
  return r;
}

std::optional<std::string> header(const Headers& headers, std::string_view name) {
  std::optional<std::string> found;
  for (const auto& [n, v] : headers) {
    if (n == name) {
      EXPECT_FALSE(found.has_value()) << "header " << name << " twice";
      found = v;
    }
  }
  return found;
}

HttpRequest preflight_request(std::string origin, std::string method,
                              std::optional<std::string> headers = std::nullopt) {
  Headers h = {{"origin", std::move(origin)}, {"access-control-request-method", std::move(method)}};
  if (headers) h.emplace_back("access-control-request-headers", *headers);
  return request("OPTIONS", std::move(h));
}

TEST(Cors, DefaultsAllowAnyOriginMethodAndHeader) {
  const CorsPolicy cors{CorsOptions{}};
  auto r = cors.preflight(preflight_request("https://ui.example", "POST",
                                            "authorization, content-type, x-stainless-os"));
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(header(r->headers, "Access-Control-Allow-Origin"), "*");
  EXPECT_EQ(header(r->headers, "Access-Control-Allow-Methods"),
            "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT");
  EXPECT_EQ(header(r->headers, "Access-Control-Allow-Headers"),
            "authorization, content-type, x-stainless-os");
  EXPECT_EQ(header(r->headers, "Access-Control-Max-Age"), "600");
  EXPECT_EQ(header(r->headers, "Access-Control-Allow-Credentials"), std::nullopt);
  EXPECT_EQ(header(r->headers, "Vary"), std::nullopt);

  const Headers actual = cors.response_headers(request("POST", {{"origin", "https://ui.example"}}));
  EXPECT_EQ(header(actual, "Access-Control-Allow-Origin"), "*");
  EXPECT_EQ(actual.size(), 1u);
}

TEST(Cors, NotAPreflightWithoutOriginOrRequestMethod) {
  const CorsPolicy cors{CorsOptions{}};
  EXPECT_FALSE(cors.preflight(request("OPTIONS", {})).has_value());
  EXPECT_FALSE(cors.preflight(request("OPTIONS", {{"origin", "https://a"}})).has_value());
  EXPECT_FALSE(
      cors.preflight(request("OPTIONS", {{"access-control-request-method", "POST"}})).has_value());
  EXPECT_FALSE(cors.preflight(request("POST", {{"origin", "https://a"},
                                               {"access-control-request-method", "POST"}}))
                   .has_value());
  // No Origin: an actual request gets no CORS header.
  EXPECT_TRUE(cors.response_headers(request("POST", {})).empty());
}

TEST(Cors, ExplicitOriginsAreEchoedWithVaryAndOthersRefused) {
  CorsOptions o;
  o.allowed_origins = {"https://ui.example", "http://localhost:3000"};
  const CorsPolicy cors(o);
  auto ok = cors.preflight(preflight_request("http://localhost:3000", "POST"));
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->status, 200);
  EXPECT_EQ(header(ok->headers, "Access-Control-Allow-Origin"), "http://localhost:3000");
  EXPECT_EQ(header(ok->headers, "Vary"), "Origin");

  auto refused = cors.preflight(preflight_request("https://evil.example", "POST"));
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->status, 400);
  EXPECT_EQ(refused->body, "Disallowed CORS origin");
  EXPECT_EQ(header(refused->headers, "Access-Control-Allow-Origin"), std::nullopt);

  const Headers actual = cors.response_headers(request("POST", {{"origin", "https://ui.example"}}));
  EXPECT_EQ(header(actual, "Access-Control-Allow-Origin"), "https://ui.example");
  EXPECT_EQ(header(actual, "Vary"), "Origin");
  EXPECT_TRUE(cors.response_headers(request("POST", {{"origin", "https://evil.example"}})).empty());
}

TEST(Cors, ExplicitMethodsAndHeaders) {
  CorsOptions o;
  o.allowed_methods = {"GET", "POST"};
  o.allowed_headers = {"Authorization", "X-Request-Id"};
  const CorsPolicy cors(o);
  auto ok = cors.preflight(preflight_request("https://a", "POST", "Content-Type,  authorization"));
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->status, 200) << ok->body;
  EXPECT_EQ(header(ok->headers, "Access-Control-Allow-Methods"), "GET, POST");
  // The listed ones lower-cased, with the CORS-safelisted ones, sorted.
  EXPECT_EQ(header(ok->headers, "Access-Control-Allow-Headers"),
            "accept, accept-language, authorization, content-language, content-type, "
            "x-request-id");

  auto bad_method = cors.preflight(preflight_request("https://a", "DELETE"));
  EXPECT_EQ(bad_method->status, 400);
  EXPECT_EQ(bad_method->body, "Disallowed CORS method");
  auto bad_header = cors.preflight(preflight_request("https://a", "PUT", "x-secret"));
  EXPECT_EQ(bad_header->status, 400);
  EXPECT_EQ(bad_header->body, "Disallowed CORS method, headers");
}

TEST(Cors, CredentialsEchoTheOriginEvenWhenAllAreAllowed) {
  CorsOptions o;
  o.allow_credentials = true;
  const CorsPolicy cors(o);
  auto r = cors.preflight(preflight_request("https://ui.example", "POST"));
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(header(r->headers, "Access-Control-Allow-Origin"), "https://ui.example");
  EXPECT_EQ(header(r->headers, "Access-Control-Allow-Credentials"), "true");
  const Headers actual = cors.response_headers(request("GET", {{"origin", "https://ui.example"}}));
  EXPECT_EQ(header(actual, "Access-Control-Allow-Origin"), "https://ui.example");
  EXPECT_EQ(header(actual, "Access-Control-Allow-Credentials"), "true");
  EXPECT_EQ(header(actual, "Vary"), "Origin");
}

TEST(Cors, EmptyOriginListAllowsNone) {
  CorsOptions o;
  o.allowed_origins = {};
  const CorsPolicy cors(o);
  EXPECT_EQ(cors.preflight(preflight_request("https://a", "GET"))->status, 400);
  EXPECT_TRUE(cors.response_headers(request("GET", {{"origin", "https://a"}})).empty());
}

TEST(Cors, ParseCorsList) {
  auto l = parse_cors_list(R"(["https://a.example", "*"])", "--allowed-origins");
  ASSERT_TRUE(l.is_ok());
  EXPECT_EQ(*l, (std::vector<std::string>{"https://a.example", "*"}));
  EXPECT_TRUE(parse_cors_list("[]", "--allowed-origins")->empty());
  for (const char* bad :
       {"*", "https://a.example", R"("*")", "[1]", R"([""])", "{}", "[", R"(["a", null])"}) {
    auto r = parse_cors_list(bad, "--allowed-origins");
    ASSERT_FALSE(r.is_ok()) << bad;
    EXPECT_EQ(r.status().message().rfind(std::string("--allowed-origins=") + bad + ": ", 0), 0u)
        << r.status().message();
  }
}

class RecordingExchange : public HttpExchange {
 public:
  void respond(HttpResponse r) override { response = std::move(r); }
  void begin_stream(int status, std::string, Headers headers) override {
    stream_status = status;
    stream_headers = std::move(headers);
  }
  void write(std::string data) override { written += data; }
  void end_stream() override { ended = true; }
  void post(std::function<void()> fn) override { fn(); }
  void on_disconnect(std::function<void()> fn) override { disconnect_fn = std::move(fn); }
  bool disconnected() const override { return true; }

  std::optional<HttpResponse> response;
  int stream_status = 0;
  Headers stream_headers;
  std::string written;
  bool ended = false;
  std::function<void()> disconnect_fn;
};

TEST(Cors, ExtraHeadersReachResponsesAndStreamsAndTheRestIsForwarded) {
  auto inner = std::make_shared<RecordingExchange>();
  auto ex = with_extra_headers(inner, {{"Access-Control-Allow-Origin", "*"}});
  HttpResponse r;
  r.status = 401;
  r.headers = {{"Retry-After", "1"}};
  ex->respond(r);
  ASSERT_TRUE(inner->response.has_value());
  EXPECT_EQ(inner->response->status, 401);
  EXPECT_EQ(inner->response->headers,
            (Headers{{"Retry-After", "1"}, {"Access-Control-Allow-Origin", "*"}}));

  ex->begin_stream(200, "text/event-stream", {});
  ex->write("data: x\n\n");
  ex->end_stream();
  EXPECT_EQ(inner->stream_status, 200);
  EXPECT_EQ(inner->stream_headers, (Headers{{"Access-Control-Allow-Origin", "*"}}));
  EXPECT_EQ(inner->written, "data: x\n\n");
  EXPECT_TRUE(inner->ended);
  EXPECT_TRUE(ex->disconnected());
  bool ran = false;
  ex->on_disconnect([&] { ran = true; });
  ex->post([&] { inner->disconnect_fn(); });
  EXPECT_TRUE(ran);
}

}  // namespace
}  // namespace s4kv::server
