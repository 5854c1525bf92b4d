// SamplingParams: one request's sampling and stopping options, with vLLM's field names and
// defaults, and validate(): the only gate between request fields and the sampler. Everything
// the sampler and the stop checker index with (logit_bias and stop_token_ids ids) is checked
// against the vocabulary here, so a bad request is an error reply, never a crash. Plain data;
// copied into each request; no engine state.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace s4kv::engine {

// Temperatures below this are greedy (argmax), as vLLM's _SAMPLING_EPS.
inline constexpr double kGreedyTemperature = 1e-5;

// Limits on request fields (vLLM leaves some unbounded; a server must not).
inline constexpr int64_t kMaxN = 128;
inline constexpr int64_t kMaxLogprobs = 20;  // OpenAI's top_logprobs maximum; vLLM's default
inline constexpr size_t kMaxStopStrings = 16;
inline constexpr size_t kMaxStopStringBytes = 256;
inline constexpr size_t kMaxStopTokenIds = 1024;
inline constexpr double kMaxLogitBias = 100.0;  // |bias| is clamped to this, as OpenAI/vLLM

struct SamplingParams {
  int64_t n = 1;
  double presence_penalty = 0.0;
  double frequency_penalty = 0.0;
  double repetition_penalty = 1.0;
  double temperature = 1.0;
  double top_p = 1.0;
  int64_t top_k = 0;  // 0 or -1: off (vLLM accepts both)
  double min_p = 0.0;
  std::optional<int64_t> seed;           // unset (or -1 at the HTTP edge): engine RNG
  std::map<int64_t, double> logit_bias;  // token id -> bias added to the logit
  // Number of top logprobs to return besides the sampled token's; unset: none. (Chat's
  // top_logprobs, completions' logprobs.)
  std::optional<int64_t> logprobs;
  std::optional<int64_t> max_tokens;  // unset: up to max_model_len - prompt length
  int64_t min_tokens = 0;
  std::vector<std::string> stop;
  std::vector<int64_t> stop_token_ids;
  bool ignore_eos = false;
  bool include_stop_str_in_output = false;
  bool skip_special_tokens = true;

  bool greedy() const { return temperature < kGreedyTemperature; }
  bool top_k_enabled() const { return top_k > 0; }
  // The penalties read the ids generated so far: async scheduling cannot sample such a row
  // while the previous token is still on the device (the engine waits for it).
  bool reads_output_ids() const {
    return repetition_penalty != 1.0 || presence_penalty != 0.0 || frequency_penalty != 0.0;
  }

  // Checks every field against vLLM's ranges and the limits above. The message of an error
  // starts with the field's OpenAI/vLLM request name (see error_param).
  Status validate(int64_t vocab_size, int64_t max_model_len) const;
};

// The request field an error from SamplingParams::validate names: its first word
// ("top_p must be in (0, 1], got 0" -> "top_p"). The HTTP layer puts it in error.param.
std::string_view error_param(std::string_view validate_message);

// max_tokens for a prompt of num_prompt_tokens: the requested value, or what is left of the
// context when unset. An error (param "max_tokens", vLLM's wording) when prompt plus
// max_tokens exceed max_model_len, or when nothing is left for output.
Result<int64_t> resolve_max_tokens(const SamplingParams& params, int64_t num_prompt_tokens,
                                   int64_t max_model_len);

}  // namespace s4kv::engine
