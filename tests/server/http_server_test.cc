// Tests for HttpServer through real sockets (http_test_client.h): limits, timeouts,
// keep-alive, streaming and disconnects as a client sees them. Framing, HEAD and the drain
// are in http_framing_test.cc.
#include "server/http_server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "http_test_client.h"

namespace s4kv::server {
namespace {

using namespace std::chrono_literals;
using namespace http_test;

// Echoes the request as "METHOD path|target|x-test header|body".
void echo(HttpRequest req, std::shared_ptr<HttpExchange> ex) {
  HttpResponse r;
  r.content_type = "text/plain";
  r.headers = {{"X-Remote", req.remote}};
  r.body = req.method + " " + req.path + "|" + req.target + "|" +
           std::string(req.header("x-test").value_or("-")) + "|" + req.body;
  ex->respond(std::move(r));
}

class HttpServerTest : public ::testing::Test {
 protected:
  void start(HttpHandler handler, HttpServerOptions options = {}) {
    options.port = 0;
    server_ = std::make_unique<HttpServer>(options, std::move(handler));
    ASSERT_TRUE(server_->start().is_ok());
    port_ = server_->port();
  }
  // Holds the exchange of the next request for the test to drive.
  HttpHandler hold() {
    return [this](HttpRequest, std::shared_ptr<HttpExchange> ex) {
      std::lock_guard lock(mu_);
      held_ = std::move(ex);
    };
  }
  std::shared_ptr<HttpExchange> held() {
    std::lock_guard lock(mu_);
    return held_;
  }

  std::unique_ptr<HttpServer> server_;
  int port_ = 0;
  std::mutex mu_;
  std::shared_ptr<HttpExchange> held_;
};

TEST_F(HttpServerTest, PortZeroResolvesAndBusyPortFails) {
  start(echo);
  EXPECT_GT(port_, 0);
  HttpServerOptions o;
  o.port = port_;
  HttpServer second(o, echo);
  const Status s = second.start();
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find(std::to_string(port_)), std::string::npos) << s.message();
}

TEST_F(HttpServerTest, GetAndPostRoundTrip) {
  start(echo);
  Client c(port_);
  ASSERT_TRUE(c.connected());
  c.send(get("/v1/models?x=1", "X-Test: hello\r\n"));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "GET /v1/models|/v1/models?x=1|hello|");
  EXPECT_EQ(r->headers["content-type"], "text/plain");
  EXPECT_EQ(r->headers["server"], "s4kv");
  EXPECT_EQ(r->headers["content-length"], std::to_string(r->body.size()));
  EXPECT_EQ(r->headers["x-remote"].rfind("127.0.0.1:", 0), 0u);

  c.send(post("/v1/completions", "{\"prompt\":\"hi\"}"));
  r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "POST /v1/completions|/v1/completions|-|{\"prompt\":\"hi\"}");
}

TEST_F(HttpServerTest, KeepAliveServesTwoRequestsOnOneConnection) {
  start(echo);
  Client c(port_);
  c.send(get("/a"));
  auto first = c.read_response();
  c.send(get("/b"));
  auto second = c.read_response();
  ASSERT_TRUE(first && second);
  EXPECT_EQ(first->body.substr(0, 6), "GET /a");
  EXPECT_EQ(second->body.substr(0, 6), "GET /b");
  EXPECT_EQ(first->headers["x-remote"], second->headers["x-remote"]);  // same client port
  EXPECT_EQ(first->headers.count("connection"), 0u);
}

TEST_F(HttpServerTest, PipelinedRequestsAnsweredInOrder) {
  start(echo);
  Client c(port_);
  c.send(get("/one") + post("/two", "body2") + get("/three", "Connection: close\r\n"));
  auto a = c.read_response();
  auto b = c.read_response();
  auto d = c.read_response();
  ASSERT_TRUE(a && b && d);
  EXPECT_EQ(a->body, "GET /one|/one|-|");
  EXPECT_EQ(b->body, "POST /two|/two|-|body2");
  EXPECT_EQ(d->body, "GET /three|/three|-|");
  EXPECT_EQ(d->headers["connection"], "close");
  EXPECT_TRUE(c.closed_by_server());
}

TEST_F(HttpServerTest, ContentLengthOverLimitIs413WithoutReadingBody) {
  std::atomic<int> calls{0};
  HttpServerOptions o;
  o.max_request_bytes = 1000;
  start([&](HttpRequest, std::shared_ptr<HttpExchange>) { ++calls; }, o);
  Client c(port_);
  c.send("POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Length: 5000\r\n\r\n");
  auto r = c.read_response();
  ASSERT_TRUE(r);
  expect_api_error(*r, 413, "RequestTooLargeError");
  EXPECT_EQ(r->headers["connection"], "close");
  EXPECT_TRUE(c.closed_by_server());
  EXPECT_EQ(calls, 0);
}

TEST_F(HttpServerTest, ChunkedBodyOverLimitIs413) {
  HttpServerOptions o;
  o.max_request_bytes = 1000;
  start(echo, o);
  Client c(port_);
  std::string req = "POST /x HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 3; ++i) req += "258\r\n" + std::string(600, 'a') + "\r\n";
  c.send(req + "0\r\n\r\n");
  auto r = c.read_response();
  ASSERT_TRUE(r);
  expect_api_error(*r, 413, "RequestTooLargeError");
}

TEST_F(HttpServerTest, ChunkedBodyWithinLimitIsDecoded) {
  start(echo);
  Client c(port_);
  c.send(
      "POST /x HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: "
      "chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n");
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "POST /x|/x|-|abcde");
}

TEST_F(HttpServerTest, HugeHeaderIs431) {
  HttpServerOptions o;
  o.max_header_bytes = 1024;
  start(echo, o);
  Client c(port_);
  c.send(get("/", "X-Big: " + std::string(2000, 'b') + "\r\n"));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  expect_api_error(*r, 431, "RequestHeaderFieldsTooLargeError");
  EXPECT_TRUE(c.closed_by_server());
}

TEST_F(HttpServerTest, TooManyHeadersIs431) {
  HttpServerOptions o;
  o.max_header_count = 10;
  start(echo, o);
  Client c(port_);
  std::string extra;
  for (int i = 0; i < 20; ++i) extra += "X-H" + std::to_string(i) + ": v\r\n";
  c.send(get("/", extra));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  const auto err = expect_api_error(*r, 431, "RequestHeaderFieldsTooLargeError");
  EXPECT_NE(err["message"].get<std::string>().find("21"), std::string::npos);  // 20 + Host
}

TEST_F(HttpServerTest, MalformedRequestLineIs400) {
  start(echo);
  Client c(port_);
  c.send("NOT A VALID REQUEST LINE\r\n\r\n");
  auto r = c.read_response();
  ASSERT_TRUE(r);
  expect_api_error(*r, 400, "BadRequestError");
  EXPECT_TRUE(c.closed_by_server());
}

TEST_F(HttpServerTest, SlowHeaderIsClosedAfterHeaderTimeout) {
  std::atomic<int> calls{0};
  HttpServerOptions o;
  o.header_timeout = 200ms;
  start([&](HttpRequest, std::shared_ptr<HttpExchange>) { ++calls; }, o);
  Client c(port_);
  c.send("GET / HTTP/1.1\r\nHost: t\r\n");  // half a header, then silence
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(c.closed_by_server());  // EOF, no response bytes
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 4s);
  EXPECT_EQ(calls, 0);
}

TEST_F(HttpServerTest, SlowBodyIs408) {
  HttpServerOptions o;
  o.body_timeout = 200ms;
  start(echo, o);
  Client c(port_);
  c.send("POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\nonly-part");
  auto r = c.read_response();
  ASSERT_TRUE(r);
  expect_api_error(*r, 408, "RequestTimeoutError");
}

TEST_F(HttpServerTest, IdleKeepAliveConnectionIsClosed) {
  HttpServerOptions o;
  o.idle_timeout = 200ms;
  start(echo, o);
  Client c(port_);
  c.send(get("/"));
  ASSERT_TRUE(c.read_response());
  EXPECT_TRUE(c.closed_by_server());
}

TEST_F(HttpServerTest, Expect100Continue) {
  HttpServerOptions o;
  o.max_request_bytes = 1000;
  start(echo, o);
  Client c(port_);
  c.send("POST /e HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n");
  auto interim = c.read_until("\r\n\r\n");
  ASSERT_TRUE(interim);
  EXPECT_EQ(interim->rfind("HTTP/1.1 100 Continue\r\n", 0), 0u) << *interim;
  c.send("hello");
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "POST /e|/e|-|hello");

  // Too large: 413 at once, never 100.
  Client big(port_);
  big.send("POST /e HTTP/1.1\r\nHost: t\r\nContent-Length: 5000\r\nExpect: 100-continue\r\n\r\n");
  r = big.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
}

TEST_F(HttpServerTest, StreamWritesFromAnotherThreadArriveInOrder) {
  std::vector<std::thread> workers;
  start([&](HttpRequest, std::shared_ptr<HttpExchange> ex) {
    ex->begin_stream(200, "text/event-stream", {{"Cache-Control", "no-cache"}});
    workers.emplace_back([ex] {
      for (int i = 1; i <= 3; ++i) {
        std::this_thread::sleep_for(20ms);  // a token every 20 ms, not synchronization
        ex->post([ex, i] { ex->write("data: " + std::to_string(i) + "\n\n"); });
      }
      ex->post([ex] { ex->end_stream(); });
    });
  });
  Client c(port_);
  c.send(post("/v1/chat/completions", "{}"));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->headers["transfer-encoding"], "chunked");
  EXPECT_EQ(r->headers["content-type"], "text/event-stream");
  EXPECT_EQ(r->headers["cache-control"], "no-cache");
  EXPECT_EQ(r->chunks, (std::vector<std::string>{"data: 1\n\n", "data: 2\n\n", "data: 3\n\n"}));
  for (auto& w : workers) w.join();
  // The connection stays usable after a stream.
  ASSERT_TRUE(server_->wait_idle(std::chrono::steady_clock::now() + 5s));
}

TEST_F(HttpServerTest, ClientCloseWhileHandlerHoldsExchangeRunsOnDisconnect) {
  std::atomic<bool> gone{false};
  start([&](HttpRequest, std::shared_ptr<HttpExchange> ex) {
    ex->on_disconnect([&gone] { gone = true; });
    std::lock_guard lock(mu_);
    held_ = std::move(ex);
  });
  Client c(port_);
  c.send(post("/slow", "x"));
  ASSERT_TRUE(wait_for([&] { return held() != nullptr; }));
  EXPECT_EQ(server_->num_active_exchanges(), 1u);
  c.close();
  EXPECT_TRUE(wait_for([&] { return gone.load(); }, 2000ms));
  EXPECT_TRUE(held()->disconnected());
  EXPECT_EQ(server_->num_active_exchanges(), 0u);
  held()->post([ex = held()] { ex->respond(HttpResponse{.body = "late"}); });  // ignored
  // Registered after the disconnect: runs at once.
  std::atomic<bool> late{false};
  held()->post([&late, ex = held()] { ex->on_disconnect([&late] { late = true; }); });
  EXPECT_TRUE(wait_for([&] { return late.load(); }));
}

TEST_F(HttpServerTest, ClientCloseMidStreamRunsOnDisconnect) {
  std::atomic<bool> gone{false};
  start([&](HttpRequest, std::shared_ptr<HttpExchange> ex) {
    ex->on_disconnect([&gone] { gone = true; });
    ex->begin_stream(200, "text/event-stream");
    ex->write("data: first\n\n");
    std::lock_guard lock(mu_);
    held_ = std::move(ex);
  });
  Client c(port_);
  c.send(post("/v1/completions", "{}"));
  ASSERT_TRUE(c.read_until("data: first\n\n"));
  c.close();
  EXPECT_TRUE(wait_for([&] { return gone.load(); }, 2000ms));
  EXPECT_TRUE(held()->disconnected());
}

TEST_F(HttpServerTest, StopAcceptingLetsInFlightStreamFinish) {
  start(hold());
  Client a(port_);
  a.send(get("/stream"));
  ASSERT_TRUE(wait_for([&] { return held() != nullptr; }));
  auto ex = held();
  ex->post([ex] { ex->begin_stream(200, "text/event-stream"); });
  ASSERT_TRUE(a.read_until("\r\n\r\n"));  // the head went out before stop_accepting

  server_->stop_accepting();
  Client b(port_);
  EXPECT_TRUE(!b.connected() || b.closed_by_server());
  EXPECT_FALSE(server_->wait_idle(std::chrono::steady_clock::now() + 50ms));

  ex->post([ex] {
    ex->write("data: a\n\n");
    ex->write("data: b\n\n");
    ex->end_stream();
  });
  auto rest = a.read_until("0\r\n\r\n");
  ASSERT_TRUE(rest);
  EXPECT_NE(rest->find("data: a\n\n"), std::string::npos);
  EXPECT_NE(rest->find("data: b\n\n"), std::string::npos);
  EXPECT_TRUE(server_->wait_idle(std::chrono::steady_clock::now() + 5s));
  EXPECT_EQ(server_->num_active_exchanges(), 0u);
  // The stream's head promised keep-alive: the connection stays for one more answer, which
  // closes it.
  a.send(get("/after"));
  ASSERT_TRUE(wait_for([&] { return held() != ex; }));
  ex = held();
  ex->post([ex] { ex->respond(HttpResponse{.body = "{}"}); });
  auto after = a.read_response();
  ASSERT_TRUE(after);
  EXPECT_EQ(after->headers["connection"], "close");
  EXPECT_TRUE(a.closed_by_server());
}

TEST_F(HttpServerTest, AfterStopAcceptingResponsesCloseTheConnection) {
  start(hold());
  Client a(port_);
  a.send(get("/"));
  ASSERT_TRUE(wait_for([&] { return held() != nullptr; }));
  server_->stop_accepting();
  auto ex = held();
  ex->post([ex] { ex->respond(HttpResponse{.body = "{}"}); });
  auto r = a.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->headers["connection"], "close");
  EXPECT_TRUE(a.closed_by_server());
}

TEST_F(HttpServerTest, HandlerExceptionIs500) {
  start([](HttpRequest, std::shared_ptr<HttpExchange>) { throw std::runtime_error("boom"); });
  Client c(port_);
  c.send(get("/"));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  expect_api_error(*r, 500, "InternalServerError");
  // The connection survives the failure.
  c.send(get("/"));
  r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 500);
}

TEST_F(HttpServerTest, DroppedExchangeWithoutAnswerIs500) {
  start([](HttpRequest, std::shared_ptr<HttpExchange>) {});
  Client c(port_);
  c.send(get("/"));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  expect_api_error(*r, 500, "InternalServerError");
  EXPECT_TRUE(server_->wait_idle(std::chrono::steady_clock::now() + 5s));
}

TEST_F(HttpServerTest, StopWithOpenExchangeIsCleanAndPostIsSafeAfterwards) {
  start(hold());
  Client c(port_);
  c.send(get("/"));
  ASSERT_TRUE(wait_for([&] { return held() != nullptr; }));
  std::atomic<bool> ran{false};
  server_->stop();
  server_->stop();  // idempotent
  EXPECT_TRUE(c.closed_by_server());
  server_.reset();
  held()->post([&ran] { ran = true; });  // the server is gone: never runs, never crashes
  held()->write("ignored");
  EXPECT_FALSE(ran);
  EXPECT_TRUE(held()->disconnected());
}

}  // namespace
}  // namespace s4kv::server
