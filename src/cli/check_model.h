// `s4kv check-model`: says whether S4 KV can serve a model, without loading it onto a device.
// Resolves --model (directory or cached ORG/NAME), validates config.json, validates the
// weight files when present (or builds dummy weights), and reports the shapes and KV cache
// cost per token. Refusals exit 2 with exactly one `error: ...` line on stderr, as start-up
// does; --json also prints a machine-readable report on stdout, listing every error.
#pragma once

#include <string>

#include "kv/kv_format.h"

namespace CLI {
class App;
}  // namespace CLI

namespace s4kv::cli {

struct CheckModelOptions {
  std::string model;                       // --model: directory or ORG/NAME
  bool json = false;                       // --json
  int block_size = kv::kDefaultBlockSize;  // --block-size
  std::string load_format = "auto";        // --load-format: "auto" | "dummy"
};

// Runs the check and prints the report; returns the process exit code (0 or 2). Never throws.
int run_check_model(const CheckModelOptions& options);

// Registers the `check-model` subcommand; its callback stores run_check_model's result in
// cli::exit_code() (cli/command.h).
void add_check_model_command(CLI::App& app);

}  // namespace s4kv::cli
