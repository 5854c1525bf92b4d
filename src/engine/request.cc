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
  S4KV_CHECK(n >= 0 && n <= num_tokens_with_placeholders(), "request ", request_id_,
             ": num_computed_tokens ", n, " outside 0..", num_tokens_with_placeholders());
  num_computed_tokens_ = n;
}

void Request::add_output_placeholder() {
  // A token is sampled from the logits of the last token, so all tokens must be scheduled.
  S4KV_CHECK(num_computed_tokens_ == num_tokens_with_placeholders() && num_output_placeholders_ < 2,
             "request ", request_id_, " samples before catching up: computed ",
             num_computed_tokens_, " of ", num_tokens_with_placeholders());
  ++num_output_placeholders_;
}

void Request::append_output_token(int32_t token_id) {
  S4KV_CHECK(num_output_placeholders_ > 0, "request ", request_id_,
             ": a sampled token without a placeholder");
  --num_output_placeholders_;
  token_ids_.push_back(token_id);
}

void Request::reset_for_recompute() {
  S4KV_CHECK(num_output_placeholders_ == 0, "request ", request_id_,
             " preempted with a step in flight");
  num_computed_tokens_ = 0;
  status_ = RequestStatus::kPreempted;
  ++num_preemptions_;
}

}  // namespace s4kv::engine
