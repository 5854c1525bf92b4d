// The two-pass fidelity evaluator behind `s4kv eval`: how far a KV cache format moves the
// model's predictions from a reference cache, on the same windows of a text.
//
// Single-pass perplexity never reads the cache it writes, so it cannot see KV quantization.
// Here each window's prefix is prefilled into the cache, then the continuation is
// teacher-forced one token per step, so every measured prediction reads the (quantized) cache.
// The reference and the tested format run the same windows; per step we compare the two
// next-token distributions (KL(reference || test), top-1 agreement, agreement where the
// reference is confident) and score the true next token (perplexities). Greedy continuations
// from each prefix measure how soon the formats' outputs part. Works on any Backend through
// backend.h; one sequence at a time, no scheduler. Several tested formats share one reference
// pass: each step feeds the reference, then every tested backend, the same token.
//
// Besides the means: the 99th percentile and the maximum of the per-position KL, how much the
// maximum hangs on single positions and windows, and 95 % bootstrap intervals over windows
// (windows resampled with replacement, a fixed seed: deterministic), so that formats are not
// told apart on noise.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "common/json.h"
#include "common/status.h"

namespace s4kv::engine {

struct FidelityOptions {
  int64_t prefix_len = 2048;
  int64_t continuation_len = 512;
  int64_t num_windows = 8;
  int64_t greedy_len = 128;
  int64_t prefill_chunk = 512;  // prefix tokens per forward call
  // When >= 0, every window starts with this token (a BOS, as a server would put first) and
  // holds prefix_len - 1 text tokens before the continuation.
  int32_t first_token = -1;
  int64_t bootstrap_resamples = 1000;
  uint64_t bootstrap_seed = 12;
};

// A 95 % bootstrap interval: the 2.5th and 97.5th percentiles over the resamples.
struct Interval {
  double lo = 0;
  double hi = 0;
};

// Per-format aggregate over all windows.
struct FidelityResult {
  int64_t num_windows = 0;
  int64_t num_positions = 0;       // compared next-token distributions
  double top1_agreement = 0;       // argmax equal, over all positions
  double confident_agreement = 0;  // over positions where the reference's top-1 p >= 0.5
  double confident_fraction = 0;   // share of such positions
  double mean_kl = 0;              // KL(reference || test), nats
  double max_kl = 0;
  double ppl_reference = 0;  // of the true next tokens
  double ppl_test = 0;
  double greedy_match_rate = 0;      // windows whose greedy continuations are identical
  double mean_first_divergence = 0;  // first differing greedy index (greedy_len if none)

  // Tails of the per-position KL. p99: nearest rank (the ceil(0.99 n)-th smallest).
  double p99_kl = 0;
  double second_max_kl = 0;  // the largest KL at another position than max_kl's
  // Per-window maxima (max_kl is the largest): how much the maximum depends on the window.
  double window_max_kl_min = 0;
  double window_max_kl_median = 0;
  // Bootstrap over windows (FidelityOptions::bootstrap_resamples); one window: no spread.
  int64_t bootstrap_resamples = 0;
  Interval mean_kl_ci, p99_kl_ci, max_kl_ci;
  Interval ppl_change_ci;  // ppl_test / ppl_reference - 1
  Interval top1_ci, confident_ci;
};

// Makes a backend whose KV cache holds at least num_tokens tokens of one sequence.
using BackendFactory = std::function<Result<std::unique_ptr<backend::Backend>>(int64_t num_blocks)>;

// Windows of prefix_len + continuation_len tokens spread evenly over `tokens`. Fails when the
// text is too short for one window.
Result<std::vector<int64_t>> window_starts(int64_t num_tokens, const FidelityOptions& options);

// Runs the reference and every tested backend over the windows; one result per tested
// backend, in order, each equal to what a run with that backend alone gives. Every factory is
// called once.
Result<std::vector<FidelityResult>> evaluate_fidelity(std::span<const int32_t> tokens,
                                                      const FidelityOptions& options,
                                                      const BackendFactory& reference,
                                                      std::span<const BackendFactory> tests);
Result<FidelityResult> evaluate_fidelity(std::span<const int32_t> tokens,
                                         const FidelityOptions& options,
                                         const BackendFactory& reference,
                                         const BackendFactory& test);

OrderedJson fidelity_to_json(const FidelityResult& r);

}  // namespace s4kv::engine
