// Request (see request.h).
#include "engine/request.h"

#include <utility>

#include "common/check.h"

namespace s4kv::engine {

std::string_view request_status_name(RequestStatus s) {
  switch (s) {
    case RequestStatus::kWaiting:
      return "waiting";
    case RequestStatus::kRunning:
      return "running";
    case RequestStatus::kPreempted:
      return "preempted";
    case RequestStatus::kFinishedStopped:
      return "finished_stopped";
    case RequestStatus::kFinishedLengthCapped:
      return "finished_length_capped";
    case RequestStatus::kFinishedAborted:
      return "finished_aborted";
  }
  return "unknown";
}

RequestStatus finished_status(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return RequestStatus::kFinishedStopped;
    case FinishReason::kLength:
      return RequestStatus::kFinishedLengthCapped;
    case FinishReason::kAbort:
      return RequestStatus::kFinishedAborted;
  }
  S4KV_CHECK(false, "bad FinishReason ", static_cast<int>(reason));
  return RequestStatus::kFinishedAborted;
}

Request::Request(RequestId request_id, std::vector<int32_t> prompt_token_ids, uint64_t arrival_seq)
    : request_id_(request_id),
      token_ids_(std::move(prompt_token_ids)),
      num_prompt_tokens_(token_ids_.size()),
      arrival_seq_(arrival_seq) {
  S4KV_CHECK(!token_ids_.empty(), "request ", request_id, " has an empty prompt");
}

void Request::set_num_computed_tokens(int64_t n) {
  S4KV_CHECK(n >= 0 && n <= num_tokens(), "request ", request_id_, ": num_computed_tokens ", n,
             " outside 0..", num_tokens());
  num_computed_tokens_ = n;
}

void Request::append_output_token(int32_t token_id) {
  // A token is sampled from the logits of the last token, so all tokens must have been computed.
  S4KV_CHECK(num_computed_tokens_ == num_tokens(), "request ", request_id_,
             " sampled before catching up: computed ", num_computed_tokens_, " of ", num_tokens());
  token_ids_.push_back(token_id);
}

void Request::reset_for_recompute() {
  num_computed_tokens_ = 0;
  status_ = RequestStatus::kPreempted;
  ++num_preemptions_;
}

}  // namespace s4kv::engine
