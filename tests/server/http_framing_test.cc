// Strict HTTP/1.1 framing, HEAD and the drain, through real sockets (http_test_client.h):
// every request framing that a front proxy could read differently is refused with 400 or 501
// and the connection closed, without the handler seeing it and without the bytes after the
// header ever being answered as a request of their own; HEAD answers carry no body, so a
// kept-alive client reads the next response correctly; after stop_accepting() a connected
// client is still answered (with Connection: close). The pure checks of http_framing.h are
// tested first.
#include "server/http_framing.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "http_test_client.h"
#include "server/http_server.h"

namespace s4kv::server {
namespace {

using namespace http_test;
using http_internal::check_transfer_encoding;
using http_internal::has_obs_fold;

// The status check_transfer_encoding gives (0: accepted) for one HTTP/1.1 field.
int te_status(std::string_view value, bool has_length = false, unsigned version = 11) {
  auto e = check_transfer_encoding({value}, has_length, version);
  return e ? e->status : 0;
}

TEST(HttpFramingCheck, OnlyExactlyOneChunkedIsAccepted) {
  EXPECT_EQ(check_transfer_encoding({}, true, 11), std::nullopt);
  EXPECT_EQ(te_status("chunked"), 0);
  EXPECT_EQ(te_status("Chunked"), 0);
  EXPECT_EQ(te_status(" chunked\t"), 0);
  for (const char* unknown : {"xchunked", "identity", "gzip", "chunked, identity", "gzip, chunked",
                              "gzip,chunked", "deflate", "chunkedx"}) {
    EXPECT_EQ(te_status(unknown), 501) << unknown;
  }
  for (const char* malformed : {"chunked, chunked", "", " ", "chunked,", ",chunked", "chunked;q=1",
                                "gzip chunked", "chunked, , chunked", "\"chunked\""}) {
    EXPECT_EQ(te_status(malformed), 400) << malformed;
  }
  // Split over two fields: read as one list.
  EXPECT_EQ(check_transfer_encoding({"gzip", "chunked"}, false, 11)->status, 501);
  EXPECT_EQ(check_transfer_encoding({"chunked", "chunked"}, false, 11)->status, 400);
  EXPECT_EQ(te_status("chunked", /*has_length=*/true), 400);
  EXPECT_EQ(te_status("gzip", /*has_length=*/true), 400);
  EXPECT_EQ(te_status("chunked", false, /*version=*/10), 400);
  const std::string long_value = "x" + std::string(1000, 'y');
  EXPECT_LT(check_transfer_encoding({long_value}, false, 11)->message.size(), 200u);
}

TEST(HttpFramingCheck, ObsFoldIsFound) {
  EXPECT_FALSE(has_obs_fold("GET / HTTP/1.1\r\nHost: a\r\nX-A: b c\r\n\r\n"));
  EXPECT_TRUE(has_obs_fold("GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n c\r\n\r\n"));
  EXPECT_TRUE(has_obs_fold("GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n\tc\r\n\r\n"));
  EXPECT_TRUE(has_obs_fold("GET / HTTP/1.1\r\n Host: a\r\n\r\n"));
}

// What a smuggler hides after the header: a complete request of its own.
const std::string kSmuggled = "GET /smuggled HTTP/1.1\r\nHost: t\r\n\r\n";

class HttpFramingTest : public ::testing::Test {
 protected:
  void start(HttpHandler handler) {
    HttpServerOptions options;
    options.port = 0;
    server_ = std::make_unique<HttpServer>(options, std::move(handler));
    ASSERT_TRUE(server_->start().is_ok());
    port_ = server_->port();
  }
  // A handler that answers "<method> <path>" with a body and counts its calls.
  void start_counting() {
    start([this](HttpRequest req, std::shared_ptr<HttpExchange> ex) {
      ++calls_;
      ex->respond(HttpResponse{.content_type = "text/plain", .body = req.method + " " + req.path});
    });
  }
  // Sends `request` on a fresh connection; expects one error answer with `status`, then the
  // connection closed with nothing more sent, and the handler never called.
  void expect_refused(const std::string& request, int status, const std::string& what) {
    SCOPED_TRACE(what);
    Client c(port_);
    ASSERT_TRUE(c.connected());
    c.send(request);
    auto r = c.read_response();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, status) << r->body;
    EXPECT_EQ(r->headers["connection"], "close");
    EXPECT_NE(r->body.find("\"error\""), std::string::npos) << r->body;
    EXPECT_TRUE(c.closed_by_server());  // the smuggled request is never answered
    EXPECT_EQ(calls_, 0);
  }

  std::unique_ptr<HttpServer> server_;
  int port_ = 0;
  std::atomic<int> calls_{0};
};

std::string post_with(const std::string& fields, const std::string& body = kSmuggled) {
  return "POST /v1/completions HTTP/1.1\r\nHost: t\r\n" + fields + "\r\n" + body;
}

TEST_F(HttpFramingTest, UnsupportedTransferEncodingIs501AndCloses) {
  start_counting();
  for (const char* te : {"xchunked", "identity", "gzip", "chunked, identity", "gzip, chunked"}) {
    expect_refused(post_with("Transfer-Encoding: " + std::string(te) + "\r\n"), 501, te);
  }
  expect_refused(post_with("Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n"), 501,
                 "two fields, gzip then chunked");
}

TEST_F(HttpFramingTest, MalformedTransferEncodingIs400AndCloses) {
  start_counting();
  for (const char* te : {"chunked, chunked", "chunked;ext=1", "chunked,", "gzip chunked"}) {
    expect_refused(post_with("Transfer-Encoding: " + std::string(te) + "\r\n"), 400, te);
  }
  expect_refused(post_with("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n"), 400,
                 "chunked twice in two fields");
  expect_refused(
      "POST /x HTTP/1.0\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + kSmuggled, 400,
      "HTTP/1.0 with Transfer-Encoding");
}

TEST_F(HttpFramingTest, ContentLengthWithTransferEncodingIs400) {
  start_counting();
  const std::string len = "Content-Length: " + std::to_string(kSmuggled.size()) + "\r\n";
  // A 0 chunk first, so that a chunked reading would end before the smuggled request.
  const std::string body = "0\r\n\r\n" + kSmuggled;
  const std::string blen = "Content-Length: " + std::to_string(body.size()) + "\r\n";
  expect_refused(post_with("Transfer-Encoding: chunked\r\n" + blen, body), 400, "TE chunked, CL");
  expect_refused(post_with(blen + "Transfer-Encoding: chunked\r\n", body), 400, "CL, TE chunked");
  expect_refused(post_with("Transfer-Encoding: gzip\r\n" + len), 400, "TE gzip, CL");
  expect_refused(post_with(len + "Transfer-Encoding: identity\r\n"), 400, "CL, TE identity");
}

TEST_F(HttpFramingTest, DifferingContentLengthsAre400) {
  start_counting();
  expect_refused(post_with("Content-Length: 0\r\nContent-Length: " +
                           std::to_string(kSmuggled.size()) + "\r\n"),
                 400, "two fields");
  expect_refused(post_with("Content-Length: 0, " + std::to_string(kSmuggled.size()) + "\r\n"), 400,
                 "one list");
  expect_refused(post_with("Content-Length: +5\r\n"), 400, "signed");
}

TEST_F(HttpFramingTest, ObsFoldAndBareLineFeedsAre400) {
  start_counting();
  const std::string body = "0\r\n\r\n" + kSmuggled;
  expect_refused(post_with("X-Pad: a\r\n Transfer-Encoding: chunked\r\n", body), 400,
                 "fold hiding Transfer-Encoding");
  expect_refused(post_with("Transfer-Encoding:\r\n chunked\r\n", body), 400,
                 "Transfer-Encoding folded");
  expect_refused(post_with("Content-Length:\r\n\t0\r\n"), 400, "Content-Length folded");
  expect_refused("POST /x HTTP/1.1\nHost: t\nContent-Length: 0\n\n" + kSmuggled, 400, "bare LF");
  expect_refused("POST /x HTTP/1.1\r\nHost: t\nTransfer-Encoding: chunked\r\n\r\n" + body, 400,
                 "bare LF in a field");
}

TEST_F(HttpFramingTest, ChunkedAndIdenticalContentLengthsStillWork) {
  start_counting();
  Client c(port_);
  c.send(post_with("Transfer-Encoding: Chunked\r\n", "3\r\nabc\r\n0\r\n\r\n") +
         post_with("Content-Length: 2\r\nContent-Length: 2\r\n", "ab"));
  auto a = c.read_response();
  auto b = c.read_response();
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->status, 200);
  EXPECT_EQ(b->status, 200);
  EXPECT_EQ(calls_, 2);
}

TEST_F(HttpFramingTest, HeadResponseHasNoBodyAndTheConnectionGoesOn) {
  start_counting();
  Client c(port_);
  c.send("HEAD /health HTTP/1.1\r\nHost: t\r\n\r\n");
  auto head = c.read_response(/*head=*/true);
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  EXPECT_EQ(head->headers["content-length"], std::to_string(std::string("HEAD /health").size()));
  EXPECT_EQ(head->headers.count("connection"), 0u);
  c.send(get("/next"));
  auto next = c.read_response();  // misread if the HEAD answer had a body
  ASSERT_TRUE(next);
  EXPECT_EQ(next->status, 200);
  EXPECT_EQ(next->body, "GET /next");
}

TEST_F(HttpFramingTest, HeadOnAStreamSendsTheHeadOnly) {
  start([](HttpRequest req, std::shared_ptr<HttpExchange> ex) {
    if (req.path == "/plain") return ex->respond(HttpResponse{.body = "plain"});
    ex->begin_stream(200, "text/event-stream");
    ex->write("data: 1\n\n");
    ex->end_stream();
  });
  Client c(port_);
  c.send("HEAD /stream HTTP/1.1\r\nHost: t\r\n\r\n");
  auto head = c.read_response(/*head=*/true);
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  EXPECT_EQ(head->headers["content-type"], "text/event-stream");
  EXPECT_EQ(head->headers.count("transfer-encoding"), 0u);
  c.send(get("/plain"));
  auto next = c.read_response();
  ASSERT_TRUE(next);
  EXPECT_EQ(next->body, "plain");
}

TEST_F(HttpFramingTest, ErrorAnswerToHeadHasNoBody) {
  start_counting();
  Client c(port_);
  c.send("HEAD / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\n\r\n");
  auto r = c.read_response(/*head=*/true);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 501);
  EXPECT_NE(r->headers["content-length"], "0");
  EXPECT_TRUE(c.closed_by_server());  // no body bytes before the close
}

TEST_F(HttpFramingTest, ConnectedClientIsAnsweredAfterStopAccepting) {
  start_counting();
  Client c(port_);
  c.send(get("/before"));
  auto before = c.read_response();
  ASSERT_TRUE(before);
  EXPECT_EQ(before->headers.count("connection"), 0u);  // kept alive, now idle
  server_->stop_accepting();
  Client late(port_);
  EXPECT_TRUE(!late.connected() || late.closed_by_server());
  c.send(get("/during"));
  auto during = c.read_response();
  ASSERT_TRUE(during);
  EXPECT_EQ(during->body, "GET /during");
  EXPECT_EQ(during->headers["connection"], "close");
  EXPECT_TRUE(c.closed_by_server());
}

}  // namespace
}  // namespace s4kv::server
