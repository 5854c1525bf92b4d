// `s4kv eval`: measures a KV cache format's fidelity against a reference format with the
// two-pass method (engine/fidelity_eval.h) on windows of a text file, and the tested format's
// bytes per token and density at 8k context. Candidate int4_kivi formats (kv_format.h
// Int4KiviVariant) are flags, or names in --candidates, which evaluates several formats
// against one shared reference pass. Prints one summary line per format; --json (one format) or
// --json-dir (one file per format) writes every metric and the settings. Bad input: exit 2, one
// `error:` line.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace CLI {
class App;
}  // namespace CLI

namespace s4kv::cli {

struct EvalOptions {
  std::string model;
  std::string text;  // --text FILE (UTF-8)
  std::string kv_cache_dtype = "int4_kivi";
  std::string reference = "auto";  // the model's 16-bit dtype
  int64_t prefix_len = 2048;
  int64_t continuation_len = 512;
  int64_t num_windows = 8;
  int64_t greedy_len = 128;
  int block_size = 64;
  int kivi_group_size = 128;         // Gv: channels per value scale/zero
  bool int4_keys_post_rope = false;  // comparison only: the KIVI paper places keys after RoPE
  // int4_kivi format v2 (kv_format.h Int4KiviVariant); 0, 0, 0 is v1, for comparisons.
  int int4_sink_blocks = 1;     // first block of a sequence kept 16-bit
  int int4_window_blocks = 1;   // last full block kept 16-bit too
  int int4_value_hadamard = 1;  // values Hadamard-rotated before quantization
  int first_token = -1;         // token put first in every window (a BOS); -1: none
  int64_t bootstrap_resamples = 1000;
  std::vector<std::string> candidates;  // formats sharing one reference pass (names)
  std::string json_out;
  std::string json_dir;  // one <format name>.json per tested format
  std::string load_format = "auto";
  std::string device = "auto";  // --device: auto | cpu | cuda
  int cpu_threads = 0;          // --cpu-threads: 0 = the cores available
  std::string dtype = "auto";   // --dtype (backend/registry.h)
};

int run_eval(const EvalOptions& options);
void add_eval_command(CLI::App& app);

}  // namespace s4kv::cli
