// `s4kv generate`: offline generation through the engine, like vLLM's LLM.generate.
//   s4kv generate --model DIR --prompt TEXT [--chat] [--max-tokens N] [--temperature T] ...
// prints the completion (streamed as it is produced) and a newline; with --jsonl it reads one
// request per stdin line (generate_jsonl.h), runs them all as one batch and writes one JSON
// line per request, in input order:
//   {"index", "text" (n = 1) | "texts" and "finish_reasons" (n > 1), "finish_reason",
//    "num_prompt_tokens", "num_generated_tokens"}
// The engine's capacity line goes to stderr. Every refusal (bad model, flag, JSON line,
// field, prompt too long, a KV cache dtype the backend cannot run) exits 2 with one
// `error: ...` line on stderr and nothing on stdout.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cli/engine_flags.h"

namespace CLI {
class App;
}  // namespace CLI

namespace s4kv::cli {

struct GenerateOptions {
  EngineFlags engine;                 // --model, --kv-cache-dtype, ... (engine_flags.h)
  std::optional<std::string> prompt;  // --prompt
  bool chat = false;                  // --chat: one user message through the chat template
  bool jsonl = false;                 // --jsonl: requests on stdin
  // Sampling defaults (a JSON line's fields override them).
  int64_t max_tokens = 16;  // vLLM's SamplingParams default
  double temperature = 1.0;
  double top_p = 1.0;
  int64_t top_k = 0;
  std::vector<std::string> stop;
};

// Runs the command; returns the exit code (0 or 2). Never throws.
int run_generate(const GenerateOptions& options);

void add_generate_command(CLI::App& app);

}  // namespace s4kv::cli
