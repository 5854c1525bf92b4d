// HttpServer on Boost.Beast: the listening socket, accepting connections (see
// http_connection.h for what one connection does), stop_accepting and stop.
// Threads: options.num_threads threads run the io_context. stop() joins them, then completes
// the cancelled operations on the calling thread without running any user callback.
#include "server/http_server.h"

#include <algorithm>
#include <future>
#include <thread>

#include "common/log.h"
#include "server/http_connection.h"

namespace s4kv::server {

std::optional<std::string_view> HttpRequest::header(std::string_view lower_name) const {
  for (const auto& [name, value] : headers) {
    if (name == lower_name) return value;
  }
  return std::nullopt;
}

namespace net = boost::asio;
using boost::system::error_code;
using http_internal::Acceptor;
using http_internal::Connection;
using http_internal::Core;
using http_internal::kLog;
using http_internal::Socket;
using http_internal::Strand;
using tcp = net::ip::tcp;

struct HttpServer::Impl {
  Impl(HttpServerOptions options, HttpHandler handler)
      : core(std::make_shared<Core>(std::move(options), std::move(handler))),
        acceptor_strand(net::make_strand(core->ioc)),
        acceptor(acceptor_strand),
        retry_timer(acceptor_strand) {}

  Status start();
  void do_accept();
  void on_accept(error_code ec, Socket socket);
  void on_acceptor_strand(std::function<void()> fn);
  void stop_accepting();
  void stop();

  std::shared_ptr<Core> core;  // declared first: the io_context outlives the members below
  Strand acceptor_strand;
  Acceptor acceptor;
  net::steady_timer retry_timer;  // re-accepts after an error such as EMFILE
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  std::vector<std::thread> threads;
  int port = 0;
  std::atomic<bool> stop_called{false};
};

Status HttpServer::Impl::start() {
  S4KV_CHECK(threads.empty() && !stop_called, "HttpServer::start() called twice or after stop()");
  const auto& o = core->options;
  const std::string where = o.host + ":" + std::to_string(o.port);
  if (o.port < 0 || o.port > 65535) return io_error("cannot listen on " + where + ": bad port");
  error_code ec;
  tcp::resolver resolver(core->ioc);
  auto results = resolver.resolve(o.host, std::to_string(o.port),
                                  tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (!ec && results.empty()) ec = net::error::host_not_found;
  if (!ec) acceptor.open(results.begin()->endpoint().protocol(), ec);
  if (!ec) acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(results.begin()->endpoint(), ec);
  if (!ec) acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    error_code ignored;
    acceptor.close(ignored);
    return io_error("cannot listen on " + where + ": " + ec.message());
  }
  port = acceptor.local_endpoint().port();
  core->accepting = true;
  do_accept();
  work.emplace(core->ioc.get_executor());
  for (int i = 0; i < std::max(1, o.num_threads); ++i) {
    threads.emplace_back([c = core.get()] { c->ioc.run(); });
  }
  return Status::ok();
}

void HttpServer::Impl::do_accept() {
  acceptor.async_accept(net::make_strand(core->ioc),
                        [this](error_code ec, Socket socket) { on_accept(ec, std::move(socket)); });
}

void HttpServer::Impl::on_accept(error_code ec, Socket socket) {
  if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
  if (ec) {
    log_warn(kLog, "accept failed: " + ec.message());
    retry_timer.expires_after(std::chrono::milliseconds(100));
    retry_timer.async_wait([this](error_code tec) {
      if (!tec && acceptor.is_open()) do_accept();
    });
    return;
  }
  if (!core->accepting) return;  // the socket closes here
  error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);  // SSE chunks go out at once
  auto conn = std::make_shared<Connection>(core.get(), std::move(socket));
  conn->set_id(core->add_connection(conn));
  core->post(conn->strand(), [conn] { conn->start(); });
  do_accept();
}

// Runs fn on the acceptor's strand; waits for it unless called from an I/O thread.
void HttpServer::Impl::on_acceptor_strand(std::function<void()> fn) {
  if (threads.empty()) return fn();
  if (core->ioc.get_executor().running_in_this_thread()) {
    net::post(acceptor_strand, std::move(fn));
    return;
  }
  std::promise<void> done;
  net::post(acceptor_strand, [&] {
    fn();
    done.set_value();
  });
  done.get_future().wait();
}

void HttpServer::Impl::stop_accepting() {
  if (!core->accepting.exchange(false)) return;
  on_acceptor_strand([this] {
    error_code ignored;
    acceptor.close(ignored);
    retry_timer.cancel();
  });
  log_info(kLog, "no longer accepting connections");
}

void HttpServer::Impl::stop() {
  if (stop_called.exchange(true)) return;
  S4KV_CHECK(!core->ioc.get_executor().running_in_this_thread(),
             "HttpServer::stop() called from an I/O thread");
  core->accepting = false;
  {
    std::lock_guard lock(core->post_mu);
    core->stopped = true;
  }
  work.reset();
  core->ioc.stop();
  for (auto& t : threads) t.join();
  threads.clear();
  // No I/O thread runs now: close everything here, then complete the cancelled operations
  // (their handlers see the connection closed; posted user functions are skipped).
  error_code ignored;
  acceptor.close(ignored);
  retry_timer.cancel();
  for (auto& c : core->connections()) c->close();
  core->ioc.restart();
  core->ioc.poll();
}

HttpServer::HttpServer(HttpServerOptions options, HttpHandler handler)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(handler))) {}

HttpServer::~HttpServer() { stop(); }

Status HttpServer::start() { return impl_->start(); }

int HttpServer::port() const { return impl_->port; }

void HttpServer::stop_accepting() { impl_->stop_accepting(); }

size_t HttpServer::num_active_exchanges() const { return impl_->core->num_active; }

bool HttpServer::wait_idle(std::chrono::steady_clock::time_point deadline) const {
  Core& core = *impl_->core;
  std::unique_lock lock(core.idle_mu);
  return core.idle_cv.wait_until(lock, deadline, [&] { return core.num_active == 0; });
}

void HttpServer::stop() { impl_->stop(); }

}  // namespace s4kv::server
