// `s4kv tokenize`: the tokenizer as a filter. Reads JSON Lines from stdin and writes JSON
// Lines to stdout: strings to id arrays, or with --decode id arrays to strings. The
// tokenizer comes from --model DIR (DIR/tokenizer.json; ORG/NAME in the local Hugging Face
// cache works too) or --tokenizer FILE. A bad line stops the run with one `error: line N:
// ...` on stderr and exit code 2, after the lines before it were written; never a crash.
#pragma once

#include <string>

namespace CLI {
class App;
}  // namespace CLI

namespace s4kv::cli {

struct TokenizeOptions {
  std::string model;                 // --model
  std::string tokenizer;             // --tokenizer
  bool decode = false;               // --decode
  bool add_special_tokens = false;   // --add-special-tokens (encode)
  bool skip_special_tokens = false;  // --skip-special-tokens (decode)
};

// Runs the filter on stdin/stdout; returns the exit code (0 or 2). Never throws.
int run_tokenize(const TokenizeOptions& options);

void add_tokenize_command(CLI::App& app);

}  // namespace s4kv::cli
