// `s4kv serve`: the OpenAI-compatible HTTP server, started as users start `vllm serve`:
//   s4kv serve models/s4kv-tiny [--host 127.0.0.1] [--port 8000] [--api-key KEY] ...
// Binds first (a port in use fails at once), answers /health 503 while the model loads, then
// serves until SIGTERM or SIGINT: it stops accepting, turns /health to 503, lets running
// requests finish for up to --shutdown-timeout seconds, aborts the rest with an error event,
// and exits 0. A refusal at start-up (bad flag, model, port) exits 2 with one `error:` line.
#pragma once

namespace CLI {
class App;
}  // namespace CLI

namespace s4kv::cli {

void add_serve_command(CLI::App& app);

}  // namespace s4kv::cli
