// ModelRunner: turns the scheduler's plan for one step into the backend's flat ForwardBatch
// with its lowered sampling rows, and runs the step: the backend samples on its device and
// returns token ids (and the logprobs asked for), never the logits. It owns the per-step host
// arrays (sized once for max_num_batched_tokens / max_num_seqs and reused, so a steady-state
// step allocates nothing here) and the seats' per-request state (backend.h): each running
// request holds the seat the scheduler gave it (ScheduledRequest::seat; for int4_kivi its 16-bit
// tail block) from the step it is (re)admitted until it finishes, is aborted or is preempted.
//
// Steps are submitted and waited for separately (at most Backend::kMaxInFlight in flight).
// A scheduled token kPlaceholderTokenId (async scheduling) becomes the deferred token of the
// request's logits row in the step submitted just before (backend.h), which the runner
// remembers.
//
// It sees block ids and token ids only; the backend owns the KV bytes. It does not decide
// what runs (the scheduler) nor what a request does with its token (the engine).
// Engine thread only.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/forward_batch_builder.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"

namespace s4kv::engine {

struct ModelRunnerConfig {
  int max_num_seqs = 0;                // seats
  int64_t max_num_batched_tokens = 0;  // tokens per step
  int64_t max_model_len = 0;           // sets max_num_blocks_per_seq
};

class ModelRunner {
 public:
  // The backend must outlive the runner. Its cache must have at least max_num_seqs seats, or
  // none (then no batch carries seats; int4_kivi needs them. S4KV_CHECK: the engine sizes both
  // from one config).
  ModelRunner(backend::Backend& backend, const ModelRunnerConfig& config);

  // Submits one step. `rows` has one entry per scheduled request with samples == true, in
  // scheduled order, lowered by `sampler`; their spans are read before this returns. A plan
  // with nothing scheduled only releases the state of finished and preempted requests and
  // submits nothing (false).
  bool submit(const SchedulerOutput& out, std::span<const SampleRow> rows, Sampler& sampler);
  // Waits for the oldest submitted step: one SampleOutput per row, in the backend's memory
  // (valid until the next wait()).
  std::span<const SampleOutput> wait();
  // Seconds spent inside the backend's wait() since construction (host time blocked on the
  // device; s4kv bench latency reports a step's share).
  double wait_seconds() const { return wait_seconds_; }

  int64_t max_num_blocks_per_seq() const { return max_num_blocks_per_seq_; }
  int num_free_seats() const { return uses_seats_ ? config_.max_num_seqs - num_seats_in_use() : 0; }
  int num_seats_in_use() const { return static_cast<int>(slot_of_.size()); }

 private:
  struct Seat {
    int32_t slot = -1;
    int64_t start = 0;  // tokens computed when the request took the slot
  };
  void release(RequestId id);
  Seat slot_for(const ScheduledRequest& s);
  void build_batch(const SchedulerOutput& out);
  void add_sequence(const ScheduledRequest& s);
  int32_t prev_row(RequestId id) const;

  backend::Backend& backend_;
  ModelRunnerConfig config_;
  int64_t block_size_;
  int64_t max_num_blocks_per_seq_;
  bool uses_seats_;

  std::vector<uint8_t> slot_held_;               // [max_num_seqs] with seats
  std::unordered_map<RequestId, Seat> slot_of_;  // running request -> its seat

  // The batch under construction; reserved at construction, cleared every step.
  backend::ForwardBatchBuilder batch_;  // this step's batch; buffers reused across steps
  // Logits rows of the requests that sample, by request id (sorted): this step's and those of
  // the step submitted before it (where deferred tokens point).
  std::vector<std::pair<RequestId, int32_t>> rows_, prev_rows_;
  std::vector<int32_t> tokens_;  // a sequence's tokens with its placeholder resolved
  double wait_seconds_ = 0.0;
};

}  // namespace s4kv::engine
