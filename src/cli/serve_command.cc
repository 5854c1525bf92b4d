#include "cli/serve_command.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "cli/command.h"
#include "cli/engine_flags.h"
#include "common/log.h"
#include "server/api_server.h"
#include "server/async_engine.h"
#include "server/cors.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "tokenizer/chat_template.h"

namespace s4kv::cli {
namespace {

constexpr const char* kVersion = "0.1.0";
constexpr int kHttpThreads = 4;
// After the engine has stopped, how long responses get to reach their clients.
constexpr auto kFlushTimeout = std::chrono::seconds(5);

struct ServeOptions {
  EngineFlags engine;
  std::string model_positional;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;
  std::vector<std::string> served_model_names;
  std::string max_request_bytes = "8MiB";
  int64_t max_queued_requests = 1024;
  double shutdown_timeout = 30.0;
  std::string generation_config = "auto";
  // JSON arrays of strings, as vllm serve takes them.
  std::string allowed_origins = R"(["*"])";
  std::string allowed_methods = R"(["*"])";
  std::string allowed_headers = R"(["*"])";
  bool allow_credentials = false;
  server::CorsOptions cors;  // the four above, parsed
  bool disable_log_requests = false;
  bool enable_log_requests = false;  // the default here; accepted for vllm serve's newer flag
  bool disable_log_stats = false;
  int tensor_parallel_size = 1;
  int pipeline_parallel_size = 1;
  bool trust_remote_code = false;
};

Status check_options(ServeOptions& o) {
  if (!o.model_positional.empty() && !o.engine.model.empty() &&
      o.model_positional != o.engine.model) {
    return invalid_argument("the model is given twice (" + o.model_positional + " and --model " +
                            o.engine.model + ")");
  }
  if (o.engine.model.empty()) o.engine.model = o.model_positional;
  if (o.engine.model.empty()) return invalid_argument("no model: s4kv serve MODEL or --model");
  if (o.port < 0 || o.port > 65535) {
    return invalid_argument("--port=" + std::to_string(o.port) + ": expected 0..65535");
  }
  if (o.max_queued_requests < 1) return invalid_argument("--max-queued-requests must be >= 1");
  if (o.tensor_parallel_size != 1 || o.pipeline_parallel_size != 1) {
    return invalid_argument(
        "--tensor-parallel-size and --pipeline-parallel-size must be 1: "
        "S4 KV serves a model on one device");
  }
  if (o.disable_log_requests && o.enable_log_requests) {
    return invalid_argument("--disable-log-requests and --enable-log-requests contradict");
  }
  if (!(o.shutdown_timeout >= 0.0 && o.shutdown_timeout <= 86400.0)) {
    return invalid_argument("--shutdown-timeout must be in [0, 86400] seconds");
  }
  if (o.api_key.empty()) {
    if (const char* env = std::getenv("S4KV_API_KEY")) o.api_key = env;
  }
  if (o.served_model_names.empty()) o.served_model_names.push_back(o.engine.model);
  for (auto [text, flag, out] :
       {std::tuple{&o.allowed_origins, "--allowed-origins", &o.cors.allowed_origins},
        std::tuple{&o.allowed_methods, "--allowed-methods", &o.cors.allowed_methods},
        std::tuple{&o.allowed_headers, "--allowed-headers", &o.cors.allowed_headers}}) {
    auto list = server::parse_cors_list(*text, flag);
    if (!list.is_ok()) return list.status();
    *out = std::move(list).value();
  }
  o.cors.allow_credentials = o.allow_credentials;
  return Status::ok();
}

// SIGINT and SIGTERM: the handler writes the signal number to a pipe that serve() reads.
// (Blocking the signals and sigwait()ing would not do: threads that libraries start before
// main, such as OpenBLAS's, would still take them and die by the default action.)
int g_signal_pipe[2] = {-1, -1};

extern "C" void on_shutdown_signal(int sig) {
  const unsigned char byte = static_cast<unsigned char>(sig);
  [[maybe_unused]] const ssize_t n = ::write(g_signal_pipe[1], &byte, 1);
}

Status install_signal_handlers() {
  if (::pipe(g_signal_pipe) != 0) return io_error("cannot create the signal pipe");
  struct sigaction sa {};
  sa.sa_handler = on_shutdown_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  if (sigaction(SIGINT, &sa, nullptr) != 0 || sigaction(SIGTERM, &sa, nullptr) != 0) {
    return io_error("cannot install the SIGINT/SIGTERM handlers");
  }
  return Status::ok();
}

// Polls the pipe with a timeout rather than blocking in read(): a runtime that defers signal
// handlers to the receiving thread's next library call (ThreadSanitizer does) then still runs
// the handler within the timeout.
int wait_for_signal() {
  pollfd fd{g_signal_pipe[0], POLLIN, 0};
  unsigned char byte = 0;
  while (true) {
    if (::poll(&fd, 1, /*timeout_ms=*/200) == 1 && ::read(g_signal_pipe[0], &byte, 1) == 1) {
      return byte;
    }
  }
}

int serve(ServeOptions& o) {
  if (Status s = check_options(o); !s.is_ok()) return fail(s.message());
  if (Status s = install_signal_handlers(); !s.is_ok()) return fail(s.message());
  if (o.trust_remote_code) {
    log_info("server", "--trust-remote-code has no effect: no code from a checkpoint runs here");
  }
  auto args = engine_args(o.engine);
  if (!args.is_ok()) return fail(args.status().message());
  auto max_request_bytes = parse_bytes(o.max_request_bytes, "--max-request-bytes");
  if (!max_request_bytes.is_ok()) return fail(max_request_bytes.status().message());

  server::ApiServer api({o.served_model_names, o.api_key, kVersion, o.cors});
  server::HttpServerOptions http_options;
  http_options.host = o.host;
  http_options.port = o.port;
  http_options.num_threads = kHttpThreads;
  http_options.max_request_bytes = static_cast<size_t>(*max_request_bytes);
  server::HttpServer http(http_options, [&api](server::HttpRequest request,
                                               std::shared_ptr<server::HttpExchange> exchange) {
    api.handle(std::move(request), std::move(exchange));
  });
  if (Status s = http.start(); !s.is_ok()) return fail(s.message());
  log_info("server", "listening on http://" + o.host + ":" + std::to_string(http.port()) +
                         " (loading " + o.engine.model + ")");

  auto llm = engine::load_llm_engine(*args);
  if (!llm.is_ok()) {
    http.stop();
    return fail(llm.status().message());
  }
  log_info("engine", llm->capacity_line);
  if (o.generation_config == "vllm") llm->generation_config = {};
  std::optional<tokenizer::ChatTemplate> tmpl;
  if (auto t = tokenizer::ChatTemplate::load(llm->model_dir, o.engine.chat_template); t.is_ok()) {
    tmpl = std::move(t).value();
  } else if (!o.engine.chat_template.empty()) {
    http.stop();
    return fail(t.status().message());
  } else {
    log_warn("server",
             "no chat template (" + t.status().message() + "): /v1/chat/completions answers 400");
  }
  server::Metrics metrics(o.served_model_names.front(), server::kv_capacity_info(*llm),
                          llm->engine->max_model_len());
  server::AsyncEngineOptions engine_options;
  engine_options.max_queued_requests = o.max_queued_requests;
  engine_options.log_requests = !o.disable_log_requests;
  if (o.disable_log_stats) engine_options.stats_interval = std::chrono::milliseconds(0);
  server::AsyncEngine engine(std::move(llm).value(), engine_options, metrics);
  api.set_engine(engine, metrics, tmpl ? &*tmpl : nullptr);
  log_info("server", "ready: model " + o.served_model_names.front() + ", max_model_len " +
                         std::to_string(engine.max_model_len()) +
                         (o.api_key.empty() ? ", no API key" : ", API key required"));

  const int sig = wait_for_signal();
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(o.shutdown_timeout * 1000));
  log_info("server", std::string(sig == SIGINT ? "SIGINT" : "SIGTERM") + ": shutting down; " +
                         std::to_string(engine.num_unfinished()) + " requests get up to " +
                         std::to_string(timeout.count()) + " ms to finish");
  // The engine refuses new work before /health turns 503, and both before the listener
  // closes: a connected client that sees /health 503 (with Connection: close) gets 503 for
  // new work too. Connections stay open until their next response.
  engine.begin_drain();
  api.set_draining();
  http.stop_accepting();
  engine.shutdown(std::chrono::steady_clock::now() + timeout);
  if (!http.wait_idle(std::chrono::steady_clock::now() + kFlushTimeout)) {
    log_warn("server", "closing connections whose responses did not finish");
  }
  http.stop();
  log_info("server", "stopped");
  return 0;
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  CLI::App* sub = app.add_subcommand("serve", "Serve the OpenAI-compatible API (vllm serve)");
  sub->add_option("model", o->model_positional, "model directory, or ORG/NAME (or --model)");
  add_engine_flags(*sub, o->engine, /*model_required=*/false);
  sub->add_option("--host", o->host, "address to listen on (0.0.0.0: every interface)")
      ->capture_default_str();
  sub->add_option("--port", o->port)->capture_default_str();
  sub->add_option("--api-key", o->api_key,
                  "require Authorization: Bearer KEY on every route but /health "
                  "(default: env S4KV_API_KEY)");
  sub->add_option("--served-model-name", o->served_model_names,
                  "names clients use in \"model\" (default: --model as given)");
  sub->add_option("--max-request-bytes", o->max_request_bytes, "largest request body (413)")
      ->capture_default_str();
  sub->add_option("--max-queued-requests", o->max_queued_requests,
                  "waiting requests beyond which new ones get 503")
      ->capture_default_str();
  sub->add_option("--shutdown-timeout", o->shutdown_timeout,
                  "seconds running requests get to finish after SIGTERM")
      ->capture_default_str();
  sub->add_option("--generation-config", o->generation_config,
                  "auto: sampling defaults from generation_config.json; vllm: none")
      ->check(CLI::IsMember({"auto", "vllm"}))
      ->capture_default_str();
  sub->add_option("--allowed-origins", o->allowed_origins,
                  "CORS: origins allowed, a JSON array of strings")
      ->capture_default_str();
  sub->add_option("--allowed-methods", o->allowed_methods,
                  "CORS: methods allowed, a JSON array of strings")
      ->capture_default_str();
  sub->add_option("--allowed-headers", o->allowed_headers,
                  "CORS: request headers allowed, a JSON array of strings")
      ->capture_default_str();
  sub->add_flag("--allow-credentials", o->allow_credentials, "CORS: allow credentials");
  sub->add_flag("--disable-log-requests", o->disable_log_requests,
                "no log line per finished request");
  sub->add_flag("--enable-log-requests", o->enable_log_requests,
                "a log line per finished request (the default)");
  sub->add_flag("--disable-log-stats", o->disable_log_stats, "no throughput line every 10 s");
  sub->add_option("--tensor-parallel-size", o->tensor_parallel_size,
                  "must be 1 (one device); -tp also works")
      ->capture_default_str();
  sub->add_option("--pipeline-parallel-size", o->pipeline_parallel_size,
                  "must be 1 (one device); -pp also works")
      ->capture_default_str();
  sub->add_flag("--trust-remote-code", o->trust_remote_code,
                "accepted for vllm serve's command lines; no effect: the architectures are built "
                "in and no code from a checkpoint ever runs");
  sub->callback([o] {
    try {
      exit_code() = serve(*o);
    } catch (const std::exception& e) {
      exit_code() = fail(std::string("serve failed: ") + e.what());
    }
  });
}

}  // namespace s4kv::cli
