#include "engine/sampling_params.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace s4kv::engine {
namespace {

// Formats "<field> <what>, got <value>." as vLLM words its errors.
template <typename T>
Status bad(std::string_view field, std::string_view what, const T& value) {
  std::ostringstream os;
  os << field << ' ' << what << ", got " << value << '.';
  return invalid_argument(os.str());
}

Status check_finite(std::string_view field, double v) {
  if (std::isfinite(v)) return Status::ok();
  return bad(field, "must be a finite number", v);
}

Status validate_floats(const SamplingParams& p) {
  S4KV_RETURN_IF_ERROR(check_finite("temperature", p.temperature));
  S4KV_RETURN_IF_ERROR(check_finite("top_p", p.top_p));
  S4KV_RETURN_IF_ERROR(check_finite("min_p", p.min_p));
  S4KV_RETURN_IF_ERROR(check_finite("presence_penalty", p.presence_penalty));
  S4KV_RETURN_IF_ERROR(check_finite("frequency_penalty", p.frequency_penalty));
  S4KV_RETURN_IF_ERROR(check_finite("repetition_penalty", p.repetition_penalty));
  if (p.temperature < 0.0) return bad("temperature", "must be non-negative", p.temperature);
  if (!(p.top_p > 0.0 && p.top_p <= 1.0)) return bad("top_p", "must be in (0, 1]", p.top_p);
  if (!(p.min_p >= 0.0 && p.min_p <= 1.0)) return bad("min_p", "must be in [0, 1]", p.min_p);
  if (std::abs(p.presence_penalty) > 2.0) {
    return bad("presence_penalty", "must be in [-2, 2]", p.presence_penalty);
  }
  if (std::abs(p.frequency_penalty) > 2.0) {
    return bad("frequency_penalty", "must be in [-2, 2]", p.frequency_penalty);
  }
  if (p.repetition_penalty <= 0.0) {
    return bad("repetition_penalty", "must be greater than zero", p.repetition_penalty);
  }
  return Status::ok();
}

Status validate_counts(const SamplingParams& p, int64_t max_model_len) {
  if (p.n < 1 || p.n > kMaxN) return bad("n", "must be in [1, " + std::to_string(kMaxN) + "]", p.n);
  // vLLM refuses this too: the n sequences would be identical.
  if (p.greedy() && p.n > 1) return bad("n", "must be 1 when using greedy sampling", p.n);
  if (p.top_k < -1) return bad("top_k", "must be 0 or -1 (disable), or at least 1", p.top_k);
  if (p.logprobs && (*p.logprobs < 0 || *p.logprobs > kMaxLogprobs)) {
    return bad("logprobs", "must be in [0, " + std::to_string(kMaxLogprobs) + "]", *p.logprobs);
  }
  if (p.max_tokens && *p.max_tokens < 1)
    return bad("max_tokens", "must be at least 1", *p.max_tokens);
  if (p.max_tokens && *p.max_tokens > max_model_len) {
    return bad("max_tokens",
               "must be at most the model's context length " + std::to_string(max_model_len),
               *p.max_tokens);
  }
  if (p.min_tokens < 0)
    return bad("min_tokens", "must be greater than or equal to 0", p.min_tokens);
  const int64_t max_tokens = p.max_tokens.value_or(max_model_len);
  if (p.min_tokens > max_tokens) {
    return bad("min_tokens",
               "must be less than or equal to max_tokens=" + std::to_string(max_tokens),
               p.min_tokens);
  }
  return Status::ok();
}

Status check_token_id(std::string_view field, int64_t id, int64_t vocab_size) {
  if (id >= 0 && id < vocab_size) return Status::ok();
  return bad(
      field,
      "contains an out-of-vocabulary token id (vocabulary size " + std::to_string(vocab_size) + ")",
      id);
}

Status validate_token_ids(const SamplingParams& p, int64_t vocab_size) {
  for (const auto& [id, bias] : p.logit_bias) {
    S4KV_RETURN_IF_ERROR(check_token_id("logit_bias", id, vocab_size));
    if (!std::isfinite(bias)) return bad("logit_bias", "values must be finite numbers", bias);
  }
  if (p.stop_token_ids.size() > kMaxStopTokenIds) {
    return bad("stop_token_ids", "must hold at most " + std::to_string(kMaxStopTokenIds) + " ids",
               p.stop_token_ids.size());
  }
  for (int64_t id : p.stop_token_ids) {
    S4KV_RETURN_IF_ERROR(check_token_id("stop_token_ids", id, vocab_size));
  }
  return Status::ok();
}

Status validate_stop(const SamplingParams& p) {
  if (p.stop.size() > kMaxStopStrings) {
    return bad("stop", "must hold at most " + std::to_string(kMaxStopStrings) + " strings",
               p.stop.size());
  }
  for (const std::string& s : p.stop) {
    if (s.empty()) return invalid_argument("stop cannot contain an empty string.");
    if (s.size() > kMaxStopStringBytes) {
      return bad("stop",
                 "strings must be at most " + std::to_string(kMaxStopStringBytes) + " bytes long",
                 std::to_string(s.size()) + " bytes");
    }
  }
  return Status::ok();
}

}  // namespace

Status SamplingParams::validate(int64_t vocab_size, int64_t max_model_len) const {
  S4KV_CHECK(vocab_size > 0 && max_model_len > 0, "validate: bad model sizes");
  S4KV_RETURN_IF_ERROR(validate_floats(*this));
  S4KV_RETURN_IF_ERROR(validate_counts(*this, max_model_len));
  S4KV_RETURN_IF_ERROR(validate_token_ids(*this, vocab_size));
  return validate_stop(*this);
}

std::string_view error_param(std::string_view message) {
  return message.substr(0, message.find_first_of(" :"));
}

Result<int64_t> resolve_max_tokens(const SamplingParams& params, int64_t num_prompt_tokens,
                                   int64_t max_model_len) {
  const int64_t left = max_model_len - num_prompt_tokens;
  const int64_t want = params.max_tokens.value_or(left);
  if (left >= 1 && want <= left) return want;
  std::ostringstream os;
  os << "max_tokens: this model's maximum context length is " << max_model_len
     << " tokens. However, you requested " << num_prompt_tokens + std::max<int64_t>(want, 1)
     << " tokens (" << num_prompt_tokens << " in the messages, " << std::max<int64_t>(want, 1)
     << " in the completion). Please reduce the length of the messages or completion.";
  return invalid_argument(os.str());
}

}  // namespace s4kv::engine
