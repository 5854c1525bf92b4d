// Connection and Exchange: reading a request within the header and body limits and timeouts,
// handing it to the handler, and writing full responses and streams in order on the
// connection's strand (see http_connection.h for the invariants).
#include "server/http_connection.h"

#include <algorithm>
#include <cctype>
#include <limits>

#include "common/log.h"
#include "server/api_error.h"
#include "server/http_framing.h"

namespace s4kv::server::http_internal {
namespace {

constexpr std::chrono::seconds kLingerTimeout{1};  // draining unread input before a close
constexpr size_t kReadChunk = 4096;

bool is_disconnect(const error_code& ec) {
  return ec == http::error::end_of_stream || ec == http::error::partial_message ||
         ec == net::error::eof || ec == net::error::connection_reset ||
         ec == net::error::broken_pipe || ec == net::error::operation_aborted ||
         ec == net::error::connection_aborted || ec == net::error::bad_descriptor;
}

template <typename Message>
void set_fields(Message& m, int status, const std::string& content_type, const Headers& headers,
                bool keep_alive) {
  m.result(static_cast<unsigned>(status >= 200 && status <= 599 ? status : 500));
  m.set(http::field::server, "s4kv");
  if (!content_type.empty()) m.set(http::field::content_type, content_type);
  for (const auto& [name, value] : headers) {
    if ((name + value).find_first_of("\r\n") != std::string::npos) {
      log_warn(kLog, "response header with CR/LF dropped: " + name);
      continue;
    }
    m.insert(name, value);
  }
  m.keep_alive(keep_alive);
}

// The handle a handler gets. Members forward to the connection on its strand; a call from
// another thread is posted there (ordered among posted calls only).
class Exchange final : public HttpExchange {
 public:
  Exchange(std::shared_ptr<Core> core, std::shared_ptr<Connection> conn,
           std::shared_ptr<ExchangeState> state)
      : core_(std::move(core)), conn_(std::move(conn)), state_(std::move(state)) {}
  // The last reference is gone: a handler that never answered gets its 500 here (see
  // Connection::fail_exchange); nothing happens for an exchange that has ended.
  ~Exchange() override {
    core_->post(conn_->strand(), [conn = conn_, st = state_] {
      conn->fail_exchange(st.get(), "handler released the exchange without finishing it");
    });
  }

  void respond(HttpResponse response) override {
    run([c = conn_, s = state_, r = std::move(response)]() mutable {
      c->respond(s.get(), std::move(r));
    });
  }
  void begin_stream(int status, std::string content_type, Headers headers) override {
    run([c = conn_, s = state_, status, ct = std::move(content_type), h = std::move(headers)] {
      c->begin_stream(s.get(), status, ct, h);
    });
  }
  void write(std::string data) override {
    run([c = conn_, s = state_, d = std::move(data)]() mutable {
      c->write(s.get(), std::move(d));
    });
  }
  void end_stream() override {
    run([c = conn_, s = state_] { c->end_stream(s.get()); });
  }
  void post(std::function<void()> fn) override { core_->post(conn_->strand(), std::move(fn)); }
  void on_disconnect(std::function<void()> fn) override {
    run([c = conn_, s = state_, fn = std::move(fn)] { c->on_disconnect(s, fn); });
  }
  bool disconnected() const override { return state_->disconnected; }

 private:
  template <typename F>
  void run(F&& f) {
    if (conn_->strand().running_in_this_thread()) {
      f();
    } else {
      core_->post(conn_->strand(), std::forward<F>(f));
    }
  }

  std::shared_ptr<Core> core_;  // declared first: destroyed after the connection
  std::shared_ptr<Connection> conn_;
  std::shared_ptr<ExchangeState> state_;
};

}  // namespace

void Connection::start_request() {
  mode_ = Mode::kRequest;
  head_ = false;
  const auto& o = core_->options;
  parser_.emplace();
  parser_->header_limit(static_cast<std::uint32_t>(
      std::min<size_t>(o.max_header_bytes, std::numeric_limits<std::uint32_t>::max())));
  parser_->body_limit(o.max_request_bytes);
  arm_timer(Phase::kHeader, o.header_timeout);
  parse_header();
}

// Parses the header from the buffer, reading more until it is complete. (Not Beast's
// async_read_header: the raw header bytes are needed to refuse obsolete line folding,
// which Beast unfolds silently.) Beast takes a header whole: put() consumes nothing until
// the empty line that ends it has arrived, then all of it.
void Connection::parse_header() {
  if (buffer_.size() > 0) {
    error_code ec;
    const size_t used = parser_->put(buffer_.data(), ec);
    if (ec && ec != http::error::need_more) return on_request_error(ec);
    if (ec) {
      buffer_.consume(used);  // 0 (see above); consumed as Beast's own read loop does
    } else if (parser_->is_header_done()) {
      head_ = parser_->get().method() == http::verb::head;
      const std::string_view header(static_cast<const char*>(buffer_.data().data()), used);
      const bool folded = has_obs_fold(header);
      buffer_.consume(used);
      if (folded) {
        disarm_timer();
        return send_error(400, "obsolete line folding in the request header");
      }
      return on_header();
    }
  }
  read_more();  // on_read_more comes back here
}

void Connection::on_header() {
  disarm_timer();
  const auto& req = parser_->get();
  const auto num_fields = static_cast<size_t>(std::distance(req.begin(), req.end()));
  if (num_fields > core_->options.max_header_count) {
    return send_error(431, "too many header fields: " + std::to_string(num_fields) + " (limit " +
                               std::to_string(core_->options.max_header_count) + ")");
  }
  std::vector<std::string_view> codings;
  for (auto [it, end] = req.equal_range(http::field::transfer_encoding); it != end; ++it) {
    codings.emplace_back(it->value().data(), it->value().size());
  }
  const bool has_length = req.find(http::field::content_length) != req.end();
  if (auto e = check_transfer_encoding(codings, has_length, req.version())) {
    return send_error(e->status, e->message);
  }
  if (!codings.empty() && !parser_->chunked()) {  // Beast framed it otherwise: never serve it
    return send_error(400, "malformed Transfer-Encoding");
  }
  if (parser_->is_done()) return dispatch();
  arm_timer(Phase::kBody, core_->options.body_timeout);
  if (!beast::iequals(req[http::field::expect], "100-continue")) return read_body();
  // The body is acceptable (Content-Length within the limit): ask the client to send it.
  auto cont =
      std::make_shared<http::response<http::empty_body>>(http::status::continue_, req.version());
  http::async_write(socket_, *cont, [self = shared_from_this(), cont](error_code wec, size_t) {
    if (self->mode_ == Mode::kClosed) return;
    if (wec) return self->on_request_error(wec);
    self->read_body();
  });
}

void Connection::read_body() {
  http::async_read(socket_, buffer_, *parser_, [self = shared_from_this()](error_code ec, size_t) {
    if (self->mode_ == Mode::kClosed) return;
    if (ec) return self->on_request_error(ec);
    self->disarm_timer();
    self->dispatch();
  });
}

void Connection::on_request_error(error_code ec) {
  const Phase timed_out = timed_out_;
  disarm_timer();
  const auto& o = core_->options;
  if (timed_out == Phase::kBody) {
    return send_error(
        408, "request body not received within " + std::to_string(o.body_timeout.count()) + " ms");
  }
  if (timed_out != Phase::kNone) {
    log_warn(kLog, remote_ + ": request headers not received in time; closing");
    return close();
  }
  if (ec == http::error::header_limit) {
    return send_error(
        431, "request line and headers exceed " + std::to_string(o.max_header_bytes) + " bytes");
  }
  if (ec == http::error::body_limit) {
    return send_error(413,
                      "request body exceeds " + std::to_string(o.max_request_bytes) + " bytes");
  }
  if (is_disconnect(ec)) return close();
  send_error(400, "malformed HTTP request: " + ec.message());
}

// An answer from the HTTP layer itself, before any handler; the connection closes after it.
void Connection::send_error(int status, const std::string& message) {
  log_warn(kLog, remote_ + ": " + std::to_string(status) + " " + message);
  keep_alive_ = false;
  version_ = 11;
  out_.push_back(OutItem{.full = make_response(HttpResponse{
                             .status = status, .body = error_body(api_error(status, message))})});
  reply_ = Reply::kEnding;
  pump_writes();
}

HttpRequest Connection::take_request() {
  auto& msg = parser_->get();
  HttpRequest r;
  r.method = std::string(msg.method_string());
  r.target = std::string(msg.target());
  r.path = r.target.substr(0, r.target.find('?'));
  for (const auto& field : msg) {
    std::string name(field.name_string());
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    r.headers.emplace_back(std::move(name), std::string(field.value()));
  }
  r.body = std::move(msg.body());
  r.remote = remote_;
  return r;
}

void Connection::dispatch() {
  keep_alive_ = parser_->get().keep_alive();
  version_ = parser_->get().version();
  chunked_ = version_ >= 11;
  HttpRequest request = take_request();
  mode_ = Mode::kExchange;
  reply_ = Reply::kNone;
  auto state = std::make_shared<ExchangeState>();
  current_ = state;
  core_->exchange_began();
  maybe_read_more();  // notices a client that goes away while the handler works
  auto exchange = std::make_shared<Exchange>(core_->shared_from_this(), shared_from_this(), state);
  try {
    core_->handler(std::move(request), std::move(exchange));
  } catch (const std::exception& e) {
    fail_exchange(state.get(), std::string("handler threw: ") + e.what());
  } catch (...) {
    fail_exchange(state.get(), "handler threw a non-standard exception");
  }
}

void Connection::maybe_read_more() {
  // Past this many buffered bytes (a pipelined request), stop reading until the exchange ends.
  const size_t limit = std::max(kReadChunk, core_->options.max_header_bytes);
  if (!reading_ && buffer_.size() < limit) read_more();
}

void Connection::read_more() {
  reading_ = true;
  socket_.async_read_some(
      buffer_.prepare(kReadChunk),
      [self = shared_from_this()](error_code ec, size_t n) { self->on_read_more(ec, n); });
}

void Connection::on_read_more(error_code ec, size_t n) {
  reading_ = false;
  if (mode_ == Mode::kClosed) return;
  buffer_.commit(n);
  switch (mode_) {
    case Mode::kExchange:
      if (!ec) return maybe_read_more();
      if (ec == net::error::eof && reply_ == Reply::kEnding) {
        keep_alive_ = false;  // half-closed after the request: finish the response, then close
        return;
      }
      log_info(kLog, remote_ + ": client went away during the exchange (" + ec.message() + ")");
      return close();
    case Mode::kRequest:
      // The header timer may have fired after this read completed but before this handler
      // ran: its cancel then found no read to abort, so honour the timeout here, or a client
      // trickling bytes would keep the connection past it.
      if (!ec && timed_out_ != Phase::kNone) ec = net::error::operation_aborted;
      if (ec) return on_request_error(ec);
      return parse_header();
    case Mode::kIdle:
      if (buffer_.size() > 0) return start_request();
      return close();  // EOF, reset, or the idle timeout cancelled the read
    case Mode::kLinger:
      buffer_.consume(buffer_.size());
      if (ec) return close();
      return read_more();
    default:
      return close();
  }
}

bool Connection::is_current(const ExchangeState* st, Reply expected, const char* what) const {
  if (st != current_.get() || mode_ == Mode::kClosed) return false;  // ended or disconnected
  if (reply_ != expected) {
    log_warn(kLog, remote_ + ": " + what + " out of order; ignored");
    return false;
  }
  return true;
}

std::unique_ptr<http::response<http::string_body>> Connection::make_response(HttpResponse r) const {
  auto msg = std::make_unique<http::response<http::string_body>>();
  msg->version(version_);
  set_fields(*msg, r.status, r.content_type, r.headers, keep_alive_);
  msg->body() = std::move(r.body);
  msg->prepare_payload();
  if (head_) msg->body().clear();  // HEAD: GET's Content-Length, no body
  return msg;
}

void Connection::respond(const ExchangeState* st, HttpResponse response) {
  if (!is_current(st, Reply::kNone, "respond")) return;
  keep_alive_ = keep_alive_ && core_->accepting && !response.close;
  out_.push_back(OutItem{.full = make_response(std::move(response))});
  reply_ = Reply::kEnding;
  pump_writes();
}

void Connection::begin_stream(const ExchangeState* st, int status, const std::string& content_type,
                              const Headers& headers) {
  if (!is_current(st, Reply::kNone, "begin_stream")) return;
  // A HEAD answer has no body, so neither framing header: the connection can stay open.
  keep_alive_ = keep_alive_ && core_->accepting && (chunked_ || head_);
  auto head = std::make_unique<StreamHead>();
  head->msg.version(version_);
  set_fields(head->msg, status, content_type, headers, keep_alive_);
  if (chunked_ && !head_) head->msg.chunked(true);
  head->sr.emplace(head->msg);
  out_.push_back(OutItem{.head = std::move(head)});
  reply_ = Reply::kStreaming;
  pump_writes();
}

void Connection::write(const ExchangeState* st, std::string data) {
  // An empty chunk would read as the terminating one.
  if (data.empty() || !is_current(st, Reply::kStreaming, "write") || head_) return;
  out_.push_back(OutItem{.chunk = std::move(data)});
  pump_writes();
}

void Connection::end_stream(const ExchangeState* st) {
  if (!is_current(st, Reply::kStreaming, "end_stream")) return;
  reply_ = Reply::kEnding;
  if (!head_) {
    out_.push_back(OutItem{.last = true});
    return pump_writes();
  }
  if (!writing_ && out_.empty()) finish_exchange();  // else on_written finishes it
}

void Connection::on_disconnect(const std::shared_ptr<ExchangeState>& st, std::function<void()> fn) {
  if (st->disconnected) return core_->post(strand(), std::move(fn));
  if (st != current_) return;  // ended: the client can no longer abandon it
  st->on_disconnect = std::move(fn);
}

void Connection::fail_exchange(const ExchangeState* st, const std::string& why) {
  if (st != current_.get() || mode_ == Mode::kClosed || reply_ == Reply::kEnding) return;
  log_error(kLog, remote_ + ": " + why);
  if (reply_ == Reply::kNone) {
    return respond(st, HttpResponse{.status = 500,
                                    .body = error_body(api_error(500, "internal server error"))});
  }
  keep_alive_ = false;
  reply_ = Reply::kEnding;
  if (!writing_ && out_.empty()) finish_exchange();
}

void Connection::pump_writes() {
  if (writing_ || out_.empty() || mode_ == Mode::kClosed) return;
  writing_ = true;
  auto done = [self = shared_from_this()](error_code ec, size_t) { self->on_written(ec); };
  OutItem& item = out_.front();
  if (item.full) {
    http::async_write(socket_, *item.full, std::move(done));
  } else if (item.head) {
    http::async_write_header(socket_, *item.head->sr, std::move(done));
  } else if (!chunked_) {
    net::async_write(socket_, net::buffer(item.chunk), std::move(done));
  } else if (item.last) {
    net::async_write(socket_, http::make_chunk_last(), std::move(done));
  } else {
    net::async_write(socket_, http::make_chunk(net::buffer(item.chunk)), std::move(done));
  }
}

void Connection::on_written(error_code ec) {
  writing_ = false;
  if (mode_ == Mode::kClosed) return;
  if (ec) {
    log_info(kLog, remote_ + ": write failed (" + ec.message() + "); closing");
    return close();
  }
  out_.pop_front();
  if (!out_.empty()) return pump_writes();
  if (reply_ == Reply::kEnding) finish_exchange();
}

void Connection::finish_exchange() {
  reply_ = Reply::kNone;
  end_exchange(false);
  // A response sent without "Connection: close" promised the client a next request, even
  // when stop_accepting() came while it was being written.
  if (!keep_alive_) return linger_close();
  go_idle();
}

void Connection::end_exchange(bool disconnected) {
  if (!current_) return;
  std::shared_ptr<ExchangeState> st = std::move(current_);
  current_.reset();
  if (disconnected) {
    st->disconnected = true;
    if (st->on_disconnect) core_->post(strand(), std::move(st->on_disconnect));
  }
  st->on_disconnect = nullptr;  // breaks the cycle of a callback that holds the exchange
  core_->exchange_ended();
}

void Connection::go_idle() {
  mode_ = Mode::kIdle;
  parser_.reset();
  if (buffer_.size() > 0) {  // the next request has begun
    if (!reading_) return start_request();
    error_code ignored;
    socket_.cancel(ignored);  // on_read_more then starts it
    return;
  }
  arm_timer(Phase::kIdle, core_->options.idle_timeout);
  if (!reading_) read_more();
}

// Closing with unread input makes the kernel send a reset that can destroy the response in
// flight (a 413 for a body still arriving), so drain until EOF, for a second at most.
void Connection::linger_close() {
  mode_ = Mode::kLinger;
  error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_send, ignored);
  arm_timer(Phase::kLinger, kLingerTimeout);
  if (!reading_) read_more();
}

void Connection::close() {
  if (mode_ == Mode::kClosed) return;
  mode_ = Mode::kClosed;
  disarm_timer();
  error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  end_exchange(true);
  core_->remove_connection(id_);
}

void Connection::arm_timer(Phase phase, std::chrono::milliseconds d) {
  phase_ = phase;
  timed_out_ = Phase::kNone;
  timer_.expires_after(d);
  timer_.async_wait([self = shared_from_this(), gen = ++timer_gen_](error_code ec) {
    if (ec || gen != self->timer_gen_ || self->mode_ == Mode::kClosed) return;
    self->timed_out_ = self->phase_;
    if (self->phase_ == Phase::kLinger) return self->close();
    error_code ignored;
    self->socket_.cancel(ignored);  // the pending read completes with operation_aborted
  });
}

void Connection::disarm_timer() {
  ++timer_gen_;
  phase_ = Phase::kNone;
  timed_out_ = Phase::kNone;
  timer_.cancel();
}

}  // namespace s4kv::server::http_internal
