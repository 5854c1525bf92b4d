// Request: one generation request as the scheduler tracks it (vLLM v1's Request, nano-vllm's
// Sequence). Its tokens are the prompt followed by the sampled outputs; num_computed_tokens of
// them have KV in the cache. The scheduler has no prefill or decode phase: every step it asks
// for some of the num_tokens() - num_computed_tokens() missing tokens to be computed, and a token
// is sampled only when the request has caught up.
//
// num_computed_tokens advances when the scheduler schedules tokens (vLLM v1): it counts the
// tokens whose KV is in the cache or being written by a step in flight. A step that samples
// leaves an output placeholder, which the sampled token replaces when the step's results are
// applied; with async scheduling the next step is scheduled before that, and a placeholder's
// position is computed from the token the step in flight samples (a deferred token, backend.h).
//
// Invariants: 0 <= num_computed_tokens() <= num_tokens_with_placeholders(); the prompt is never
// empty; output tokens are only appended, never removed (preemption keeps them and recomputes
// their KV); placeholders only while a step that samples for the request is in flight.
//
// It does not know max_tokens, stop strings or sampling parameters: the engine owns those and
// calls Scheduler::finish. Thread ownership: engine thread only.
#pragma once

#include <climits>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "engine/finish_reason.h"
#include "kv/kv_cache_manager.h"

namespace s4kv::engine {

using RequestId = kv::RequestId;

enum class RequestStatus {
  kWaiting,    // queued, never admitted
  kRunning,    // holds KV blocks and a seat among max_num_seqs
  kPreempted,  // evicted for memory: no blocks, back in the waiting queue, outputs kept
  kFinishedStopped,
  kFinishedLengthCapped,
  kFinishedAborted,
};

std::string_view request_status_name(RequestStatus s);
RequestStatus finished_status(FinishReason reason);
inline bool is_finished(RequestStatus s) { return s >= RequestStatus::kFinishedStopped; }

class Request {
 public:
  // prompt_token_ids must be non-empty (S4KV_CHECK; the scheduler refuses empty prompts with a
  // Status before constructing one). arrival_seq orders requests first-come first-served.
  Request(RequestId request_id, std::vector<int32_t> prompt_token_ids, uint64_t arrival_seq);

  RequestId request_id() const { return request_id_; }
  uint64_t arrival_seq() const { return arrival_seq_; }
  RequestStatus status() const { return status_; }
  int num_preemptions() const { return num_preemptions_; }

  std::span<const int32_t> prompt_token_ids() const {
    return std::span(token_ids_).first(num_prompt_tokens_);
  }
  std::span<const int32_t> output_token_ids() const {
    return std::span(token_ids_).subspan(num_prompt_tokens_);
  }
  // Prompt then outputs, contiguous: what the KV cache manager hashes.
  std::span<const int32_t> all_token_ids() const { return token_ids_; }

  int64_t num_prompt_tokens() const { return static_cast<int64_t>(num_prompt_tokens_); }
  int64_t num_output_tokens() const { return num_tokens() - num_prompt_tokens(); }
  int64_t num_tokens() const { return static_cast<int64_t>(token_ids_.size()); }
  int64_t num_computed_tokens() const { return num_computed_tokens_; }
  // Tokens sampled by steps in flight, not yet known (0, 1, or 2 with a step scheduled ahead).
  int num_output_placeholders() const { return num_output_placeholders_; }
  int64_t num_tokens_with_placeholders() const { return num_tokens() + num_output_placeholders_; }
  // The request's end (max_tokens) when the engine gave one: the scheduler never schedules
  // past it. Unset: only max_model_len bounds it.
  int64_t max_output_tokens() const { return max_output_tokens_; }

  // Mutators for the scheduler. Each checks the invariants above.
  void set_status(RequestStatus s) { status_ = s; }
  void set_num_computed_tokens(int64_t n);
  void set_max_output_tokens(int64_t n) { max_output_tokens_ = n; }
  // A step that samples for this request was scheduled.
  void add_output_placeholder();
  // That step's token arrived: it replaces the oldest placeholder.
  void append_output_token(int32_t token_id);
  // Preemption by recompute: the KV is gone, so nothing counts as computed any more.
  void reset_for_recompute();

 private:
  RequestId request_id_;
  std::vector<int32_t> token_ids_;  // prompt then outputs
  size_t num_prompt_tokens_;
  uint64_t arrival_seq_;
  int64_t num_computed_tokens_ = 0;
  int num_output_placeholders_ = 0;
  int64_t max_output_tokens_ = INT64_MAX;
  RequestStatus status_ = RequestStatus::kWaiting;
  int num_preemptions_ = 0;
};

}  // namespace s4kv::engine
