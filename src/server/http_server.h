// HttpServer: the HTTP/1.1 edge on Boost.Beast, asynchronous, on a small pool of I/O threads.
// It owns sockets, parsing, limits and timeouts, and nothing of the API: every well-formed
// request goes to one HttpHandler with an HttpExchange through which the handler answers,
// once (respond) or as a chunked stream (begin_stream / write / end_stream, used for SSE).
//
// Limits, enforced before a handler runs, answered with an ApiError body (api_error.h) and
// the connection closed: request line plus headers over max_header_bytes or more than
// max_header_count fields -> 431; a body (Content-Length or chunked) over max_request_bytes
// -> 413; headers not complete within header_timeout (slow clients) -> connection closed;
// a body not complete within body_timeout -> 408; malformed HTTP -> 400; framing other than
// one Content-Length or exactly "Transfer-Encoding: chunked" -> 400 or 501 (http_framing.h).
//
// HEAD requests go to the handler like any other; their response goes out without a body (a
// full response keeps the Content-Length of its body; a stream sends its head only).
//
// Threads: each connection runs on its own strand; an exchange's members (except post) are
// called on that strand only. A handler may keep the exchange and answer later from another
// thread by post()ing onto it. Keep-alive is supported; after stop_accepting() every
// response carries "Connection: close", and connections stay open until their next response
// has gone out (so that clients already connected can observe a drain).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace s4kv::server {

using Headers = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;  // as sent: "GET", "POST", ...
  std::string target;  // as sent: "/v1/models?x=1"
  std::string path;    // target without the query string
  Headers headers;     // names lower-cased, values as sent
  std::string body;
  std::string remote;  // "address:port" of the peer, for logs

  // The first header with this lower-case name.
  std::optional<std::string_view> header(std::string_view lower_name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";  // empty: no Content-Type header
  Headers headers;                                // extra headers (Retry-After ...)
  std::string body;
  // Close the connection after this response (the drain's answers: set by the handler, which
  // may learn of the drain before the HTTP layer's stop_accepting).
  bool close = false;
};

// One request and its response. Obtained by the handler as a shared_ptr; the connection
// reads its next request only after the exchange has ended (respond or end_stream).
// Called off the strand, respond/begin_stream/write/end_stream/on_disconnect are posted to it
// (ordered among posted calls only). When the last reference goes before the exchange has
// ended, the server finishes it: no response yet -> 500 with an ApiError body; a stream open
// -> the connection closes after the queued chunks, without the terminating chunk, so the
// client sees the body cut. Handles stay safe to use (and do nothing) after the server is gone.
class HttpExchange {
 public:
  virtual ~HttpExchange() = default;

  // The whole response; ends the exchange. Ignored after a disconnect.
  virtual void respond(HttpResponse response) = 0;
  // Starts a chunked response (Transfer-Encoding: chunked) with these headers; then write()
  // chunks and end_stream(). For SSE: content_type "text/event-stream".
  virtual void begin_stream(int status, std::string content_type, Headers headers = {}) = 0;
  // Queues one chunk; chunks go out in order, each as soon as the socket takes it. Ignored
  // after a disconnect.
  virtual void write(std::string data) = 0;
  // The terminating chunk; ends the exchange once every queued chunk is written.
  virtual void end_stream() = 0;

  // Thread-safe: runs fn on the exchange's strand, even after a disconnect (so that the
  // handler can clean up), never after the server has stopped.
  virtual void post(std::function<void()> fn) = 0;
  // fn runs once, on the strand, when the client goes away before the exchange has ended:
  // it closed or reset the connection (noticed while the handler works, not only at the next
  // write; a client that half-closes its side counts as gone), or a write failed, or the server
  // stopped (then fn does not run, but disconnected() turns true). Registered after that, fn is
  // posted at once.
  virtual void on_disconnect(std::function<void()> fn) = 0;
  virtual bool disconnected() const = 0;
};

using HttpHandler =
    std::function<void(HttpRequest request, std::shared_ptr<HttpExchange> exchange)>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: a free port (see HttpServer::port)
  int num_threads = 2;
  size_t max_request_bytes = 8u << 20;              // body: over -> 413
  size_t max_header_bytes = 16u << 10;              // request line + headers: over -> 431
  size_t max_header_count = 100;                    // header fields: over -> 431
  std::chrono::milliseconds header_timeout{10000};  // from first byte (or connect) to headers
  std::chrono::milliseconds body_timeout{60000};    // from headers to the end of the body
  std::chrono::milliseconds idle_timeout{60000};    // keep-alive wait for a next request
};

// start() and stop() are called from the owner's thread, never from a handler or an I/O
// thread; stop_accepting() from any thread.
class HttpServer {
 public:
  HttpServer(HttpServerOptions options, HttpHandler handler);
  ~HttpServer();  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds, listens and starts the I/O threads. kIoError naming host:port when the address
  // cannot be bound (in use, bad host).
  Status start();
  // The port bound (after start; resolves port 0).
  int port() const;

  // Closes the listening socket: new connections are refused; open ones, idle keep-alive ones
  // included, are closed after their next response (which carries "Connection: close"), at
  // the idle timeout, or at stop().
  void stop_accepting();
  // Exchanges begun and not yet ended (handlers working, streams open).
  size_t num_active_exchanges() const;
  // Blocks until num_active_exchanges() is 0 or the deadline passes; true when idle.
  bool wait_idle(std::chrono::steady_clock::time_point deadline) const;
  // Closes every connection, stops the I/O threads and joins them. Idempotent.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace s4kv::server
