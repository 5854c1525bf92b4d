// The connection side of HttpServer (internal to http_server.cc and http_connection.cc):
// Core, what every connection shares (options, handler, counters, registry, io_context);
// ExchangeState, one exchange's flags shared by its handle and its connection; Connection,
// one socket's request parsing, limits, timeouts and writes.
// Invariants: a Connection touches its state on its own strand only; at most one read and one
// write are pending on its socket; a request is answered before the next one is parsed
// (pipelined bytes wait in the read buffer). While a handler works or a stream is open, one
// read stays pending, so that EOF or a reset is noticed at once (a client that half-closes its
// side after the request counts as gone, as in other servers).
// Lifetime: an Exchange holds its Connection and the Core (io_context) alive, so post() and
// the exchange's destructor stay safe after the server is gone; they do nothing then.
#pragma once

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "server/http_server.h"

namespace s4kv::server::http_internal {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using boost::system::error_code;
using Strand = net::strand<net::io_context::executor_type>;
using Socket = tcp::socket::rebind_executor<Strand>::other;
using Acceptor = tcp::acceptor::rebind_executor<Strand>::other;

inline constexpr char kLog[] = "http";

class Connection;

// What connections share: options, handler, counters, the registry and the io_context.
struct Core : std::enable_shared_from_this<Core> {
  Core(HttpServerOptions o, HttpHandler h) : options(std::move(o)), handler(std::move(h)) {}

  // Posts fn onto the strand unless the server has stopped; skipped if it stops meanwhile.
  void post(const Strand& strand, std::function<void()> fn) {
    std::lock_guard lock(post_mu);
    if (stopped) return;
    net::post(strand, [this, fn = std::move(fn)] {
      if (!stopped) fn();
    });
  }
  void exchange_began() { ++num_active; }
  void exchange_ended() {
    if (--num_active == 0) {
      std::lock_guard lock(idle_mu);
      idle_cv.notify_all();
    }
  }
  uint64_t add_connection(std::weak_ptr<Connection> c) {
    std::lock_guard lock(conns_mu);
    conns.emplace(next_conn_id, std::move(c));
    return next_conn_id++;
  }
  void remove_connection(uint64_t id) {
    std::lock_guard lock(conns_mu);
    conns.erase(id);
  }
  std::vector<std::shared_ptr<Connection>> connections() {
    std::lock_guard lock(conns_mu);
    std::vector<std::shared_ptr<Connection>> out;
    for (auto& [id, weak] : conns) {
      if (auto c = weak.lock()) out.push_back(std::move(c));
    }
    return out;
  }

  const HttpServerOptions options;
  const HttpHandler handler;
  std::atomic<bool> accepting{false};
  std::atomic<bool> stopped{false};
  std::atomic<size_t> num_active{0};
  std::mutex post_mu;
  std::mutex idle_mu;
  std::condition_variable idle_cv;
  std::mutex conns_mu;
  std::unordered_map<uint64_t, std::weak_ptr<Connection>> conns;
  uint64_t next_conn_id = 1;
  net::io_context ioc;  // last member: destroyed first, with any handler still queued
};

// One exchange's state shared by its Exchange handle and its Connection.
struct ExchangeState {
  std::atomic<bool> disconnected{false};
  std::function<void()> on_disconnect;  // strand only; cleared when posted or when it ends
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(Core* core, Socket socket)
      : core_(core), socket_(std::move(socket)), timer_(socket_.get_executor()) {
    error_code ec;
    const auto ep = socket_.remote_endpoint(ec);
    remote_ = ec ? "?" : ep.address().to_string() + ":" + std::to_string(ep.port());
  }

  Strand strand() { return socket_.get_executor(); }
  void set_id(uint64_t id) { id_ = id; }
  void start() { start_request(); }
  // Closes the socket; an exchange in progress counts as disconnected. Idempotent.
  void close();

  // HttpExchange operations, on the strand; ignored unless `st` is the exchange in progress.
  void respond(const ExchangeState* st, HttpResponse response);
  void begin_stream(const ExchangeState* st, int status, const std::string& content_type,
                    const Headers& headers);
  void write(const ExchangeState* st, std::string data);
  void end_stream(const ExchangeState* st);
  void on_disconnect(const std::shared_ptr<ExchangeState>& st, std::function<void()> fn);
  // The handler failed (threw) or released its last reference to the exchange: an exchange
  // without a response gets a 500; an open stream is cut (the connection closes after the
  // queued chunks, without the terminating chunk, so the client sees it incomplete).
  void fail_exchange(const ExchangeState* st, const std::string& why);

 private:
  // kRequest: reading a request; kExchange: the handler has it; kIdle: keep-alive wait;
  // kLinger: response sent, draining input until EOF before closing.
  enum class Mode { kRequest, kExchange, kIdle, kLinger, kClosed };
  enum class Phase { kNone, kHeader, kBody, kIdle, kLinger };
  enum class Reply { kNone, kStreaming, kEnding };
  struct StreamHead {
    http::response<http::empty_body> msg;
    std::optional<http::response_serializer<http::empty_body>> sr;
  };
  struct OutItem {  // exactly one of: a full response, a stream head, a chunk, the last chunk
    std::unique_ptr<http::response<http::string_body>> full;
    std::unique_ptr<StreamHead> head;
    std::string chunk;
    bool last = false;
  };

  void start_request();
  void parse_header();
  void on_header();
  void read_body();
  void on_request_error(error_code ec);
  void send_error(int status, const std::string& message);
  void dispatch();
  HttpRequest take_request();
  void maybe_read_more();
  void read_more();
  void on_read_more(error_code ec, size_t n);
  bool is_current(const ExchangeState* st, Reply expected, const char* what) const;
  std::unique_ptr<http::response<http::string_body>> make_response(HttpResponse r) const;
  void pump_writes();
  void on_written(error_code ec);
  void finish_exchange();
  void end_exchange(bool disconnected);
  void go_idle();
  void linger_close();
  void arm_timer(Phase phase, std::chrono::milliseconds d);
  void disarm_timer();

  Core* core_;  // outlives this: owns the io_context that runs it, or held by its Exchange
  Socket socket_;
  net::steady_timer timer_;
  std::string remote_;
  uint64_t id_ = 0;
  Mode mode_ = Mode::kRequest;
  beast::flat_buffer buffer_;  // bytes read and not yet parsed (pipelined requests)
  std::optional<http::request_parser<http::string_body>> parser_;
  bool reading_ = false;  // a read_more() is pending
  bool writing_ = false;
  Phase phase_ = Phase::kNone;      // what the armed timer limits
  Phase timed_out_ = Phase::kNone;  // set when it fired, until disarmed
  uint64_t timer_gen_ = 0;
  std::shared_ptr<ExchangeState> current_;  // the exchange in progress; null when none
  Reply reply_ = Reply::kNone;
  bool keep_alive_ = false;
  bool head_ = false;    // the request is HEAD: responses go out without a body
  bool chunked_ = true;  // HTTP/1.0 clients get a raw stream ended by the close
  unsigned version_ = 11;
  std::deque<OutItem> out_;  // front is being written while writing_
};

}  // namespace s4kv::server::http_internal
