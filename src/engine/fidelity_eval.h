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
// backend.h; one sequence at a time, no scheduler.
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
};

// Makes a backend whose KV cache holds at least num_tokens tokens of one sequence.
using BackendFactory = std::function<Result<std::unique_ptr<backend::Backend>>(int64_t num_blocks)>;

// Windows of prefix_len + continuation_len tokens spread evenly over `tokens`. Fails when the
// text is too short for one window.
Result<std::vector<int64_t>> window_starts(int64_t num_tokens, const FidelityOptions& options);

// Runs both backends over the windows. `reference` and `test` are called once each.
Result<FidelityResult> evaluate_fidelity(std::span<const int32_t> tokens,
                                         const FidelityOptions& options,
                                         const BackendFactory& reference,
                                         const BackendFactory& test);

OrderedJson fidelity_to_json(const FidelityResult& r);

}  // namespace s4kv::engine
