// Request: one generation request as the scheduler tracks it (vLLM v1's Request, nano-vllm's
// Sequence). Its tokens are the prompt followed by the sampled outputs; num_computed_tokens of
// them have KV in the cache. The scheduler has no prefill or decode phase: every step it asks
// for some of the num_tokens() - num_computed_tokens() missing tokens to be computed, and a token
// is sampled only when the request has caught up.
//
// Invariants: 0 <= num_computed_tokens() <= num_tokens(); the prompt is never empty; output
// tokens are only appended, never removed (preemption keeps them and recomputes their KV).
//
// It does not know max_tokens, stop strings or sampling parameters: the engine owns those and
// calls Scheduler::finish. Thread ownership: engine thread only.
#pragma once

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

  // Mutators for the scheduler. Each checks the invariants above.
  void set_status(RequestStatus s) { status_ = s; }
  void set_num_computed_tokens(int64_t n);
  void append_output_token(int32_t token_id);
  // Preemption by recompute: the KV is gone, so nothing counts as computed any more.
  void reset_for_recompute();

 private:
  RequestId request_id_;
  std::vector<int32_t> token_ids_;  // prompt then outputs
  size_t num_prompt_tokens_;
  uint64_t arrival_seq_;
  int64_t num_computed_tokens_ = 0;
  RequestStatus status_ = RequestStatus::kWaiting;
  int num_preemptions_ = 0;
};

}  // namespace s4kv::engine
