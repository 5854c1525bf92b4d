// Scheduler: continuous batching in the vLLM v1 style. There are no prefill and decode phases:
// each request's num_computed_tokens catches up to its num_tokens, and the one scheduling
// primitive is "schedule k more tokens for this request". Each step mixes decode tokens and
// prefill chunks in one flat batch under one token budget (max_num_batched_tokens).
//
// A step, as the engine drives it:
//   out = schedule()                       running requests first (FCFS), then waiting ones
//   sampled = model runner forward(out)    one token per entry with samples == true
//   results = update_from_output(out, sampled)
//   finish(id, reason) for requests the engine stops (max_tokens, stop tokens ...)
//
// Memory: blocks come from the owned KvCacheManager. When a running request cannot get the
// blocks it needs, the latest-arrived running request is preempted by recompute (its blocks are
// freed, its num_computed_tokens reset to 0, its output tokens kept) and goes to the front of the
// waiting queue; on resumption its prompt and outputs are recomputed as one prefill, so greedy
// outputs do not change. Prefix-cache hits (full cached blocks) skip computation, never of the
// last token.
//
// Invariants (check_invariants()): running requests are in arrival order, all of them arrived
// before every waiting request, and the waiting queue is in arrival order too; so the latest-
// arrived running request is running_.back() and admission is strictly first-come first-served.
// Waiting and preempted requests hold no blocks. At most max_num_seqs requests run.
//
// Async scheduling (vLLM v1's): num_computed_tokens advances when a step is scheduled, and a
// step that samples leaves an output placeholder in the request (request.h). schedule_ahead()
// plans step N+1 while step N is in flight (scheduled, its results not yet applied): a request
// that samples in N gets its next decode token as a placeholder (kPlaceholderTokenId in
// token_ids, computed from N's sampled token by the backend); a request whose last token
// (max_tokens, max_model_len) is in flight is left out; it never preempts (it refuses instead,
// and the engine waits for N and schedules again). Results are applied in schedule order; a
// request finished after N was scheduled ahead loses N+1's work (its token is dropped).
//
// It does not sample, stop requests on stop tokens (the engine calls finish), or see KV bytes
// (block ids only). It finishes a request by itself only when its tokens reach max_model_len.
// Thread ownership: engine thread only; nothing here locks.
#pragma once

#include <climits>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "engine/request.h"
#include "kv/kv_cache_manager.h"

namespace s4kv::engine {

struct SchedulerConfig {
  int max_num_seqs = 256;                 // --max-num-seqs
  int64_t max_num_batched_tokens = 8192;  // --max-num-batched-tokens: token budget per step
  int64_t max_model_len = 4096;           // --max-model-len: prompt + outputs
  // Caps one request's tokens per step so a long prompt cannot starve the others; 0 = off.
  int64_t long_prefill_token_threshold = 0;
  // Off: a request's whole remaining prefill must fit one step's budget.
  bool enable_chunked_prefill = true;
  // --async-scheduling: the engine schedules and submits step N+1 (schedule_ahead) before it
  // waits for step N, so host work overlaps the device's.
  bool async_scheduling = false;
};

struct CacheConfig {
  int num_blocks = 0;
  int block_size = 64;  // --block-size
  bool enable_prefix_caching = true;
  uint64_t hash_salt = kv::process_hash_salt();  // a fixed value in tests that compare hashes
  // int4_kivi v2: every request's first block from a pool of this many 16-bit sink blocks (ids
  // after the main pool's; kv_cache_manager.h). 0: none.
  int num_sink_blocks = 0;
  // int4_kivi: main-pool blocks each seat's 16-bit residual ring takes (kv_cache_manager.h);
  // the scheduler gives every running request one of max_num_seqs seats. 0: seats hold no
  // blocks.
  int blocks_per_seat = 0;
  // int4_kivi: the sink blocks' 16-bit bytes as runs of this many main-pool blocks, below the
  // seats' (kv_cache_manager.h "Sink runs"); 0: the sink pool has memory of its own.
  int sink_run_blocks = 0;
};

// A token of ScheduledRequest::token_ids that the step in flight samples (schedule_ahead).
inline constexpr int32_t kPlaceholderTokenId = -1;

// One request's share of a step: compute the tokens at positions
// [num_computed_tokens, num_computed_tokens + num_scheduled_tokens).
struct ScheduledRequest {
  RequestId request_id = 0;
  int64_t num_computed_tokens = 0;  // first position to compute; KV before it is in the cache
  int64_t num_scheduled_tokens = 0;
  // [num_scheduled_tokens]: the tokens at those positions; the last may be kPlaceholderTokenId
  // (schedule_ahead: the token the step in flight samples for this request).
  std::vector<int32_t> token_ids;
  std::vector<kv::BlockId> block_table;    // the whole table, covering every position computed
  std::vector<kv::BlockId> new_block_ids;  // the table's blocks allocated by this step
  // The request's seat (0..max_num_seqs - 1), held from admission to finish or preemption.
  int32_t seat = -1;
  // First step since admission or resumption: the runner (re)creates its per-request state.
  bool is_new = false;
  // The chunk ends at the request's last token, so the runner samples one token for it.
  bool samples = false;
};

struct SchedulerOutput {
  std::vector<ScheduledRequest> scheduled;  // running requests first, in order, then admitted
  int64_t total_num_scheduled_tokens = 0;
  // Preempted in this step: the runner drops their per-request state (their blocks are free).
  std::vector<RequestId> preempted_ids;
  // Finished or aborted since the previous schedule(), including requests the runner never saw.
  std::vector<RequestId> finished_ids;
};

// What update_from_output reports for each request that sampled a token.
struct TokenOutput {
  RequestId request_id = 0;
  int32_t token_id = 0;
  // Set when the scheduler finished the request itself (kLength: max_model_len reached).
  std::optional<FinishReason> finish_reason;
};

class Scheduler {
 public:
  // Refuses configs that could deadlock or loop: a request of max_model_len tokens must fit the
  // whole KV cache (otherwise a lone request could need more blocks than exist and be preempted
  // forever), and without chunked prefill one step must hold a whole max_model_len prompt.
  static Status validate(const SchedulerConfig& config, const CacheConfig& cache);
  // Main-pool blocks one sequence of `tokens` holds while it runs: its blocks but a sink block
  // (the sink pool's), its seat's run and its sink's run.
  static int64_t blocks_per_sequence(int64_t tokens, const CacheConfig& cache);

  // The configs must pass validate() (S4KV_CHECK: the engine validates at start-up).
  Scheduler(const SchedulerConfig& config, const CacheConfig& cache);

  // Queues a request (FCFS). Refuses an empty prompt, a duplicate live id, and a prompt longer
  // than max_model_len (which, by validate(), is also every prompt that cannot fit the cache).
  // max_output_tokens (the engine's max_tokens): schedule_ahead never schedules past it.
  Status add_request(RequestId id, std::vector<int32_t> prompt_token_ids,
                     int64_t max_output_tokens = INT64_MAX);

  // Plans one step with no step in flight (S4KV_CHECK): every step scheduled before it has had
  // its update_from_output.
  SchedulerOutput schedule();
  // Plans the step after the one in flight (exactly one, S4KV_CHECK), on top of its
  // placeholders. nullopt, changing nothing, when the running requests' next tokens need more
  // blocks than are free (a synchronous schedule() would preempt).
  std::optional<SchedulerOutput> schedule_ahead();
  // Steps scheduled (with something in them) whose update_from_output has not run.
  int num_steps_in_flight() const { return num_steps_in_flight_; }

  // Applies the oldest step in flight: `sampled` has one entry per out.scheduled entry (read
  // only where samples is true). Replaces placeholders with the sampled tokens, caches newly
  // full blocks. Entries of requests finished or aborted since schedule() are skipped.
  std::vector<TokenOutput> update_from_output(const SchedulerOutput& out,
                                              std::span<const int32_t> sampled);

  // Finishes a waiting, running or preempted request and frees its blocks now. Returns the
  // request in its final state, or nullptr when the id is unknown or already finished.
  std::unique_ptr<Request> finish(RequestId id, FinishReason reason);
  // finish(id, kAbort); false when the id is unknown or already finished.
  bool abort(RequestId id);

  const Request* get_request(RequestId id) const;
  bool has_unfinished_requests() const { return !requests_.empty(); }

  // Metrics (vllm:num_requests_running / _waiting, vllm:kv_cache_usage_perc,
  // vllm:num_preemptions_total).
  int num_running() const { return static_cast<int>(running_.size()); }
  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  double kv_cache_usage() const { return kv_.usage(); }
  int64_t num_preemptions_total() const { return num_preemptions_total_; }

  const SchedulerConfig& config() const { return config_; }
  const kv::KvCacheManager& kv_cache_manager() const { return kv_; }
  // S4KV_CHECK on any broken invariant (see the top of this file), the KV manager's included.
  void check_invariants() const;

 private:
  // scheduler_step.cc: one step's planning.
  SchedulerOutput plan(bool ahead);
  void schedule_running(SchedulerOutput& out, int64_t& budget, bool ahead);
  void schedule_waiting(SchedulerOutput& out, int64_t& budget);
  bool allocate_or_preempt(Request& req, int64_t num_new_tokens, SchedulerOutput& out);
  void preempt_last_running(SchedulerOutput& out);
  // Tokens the request could schedule now: 0 once its last token is scheduled.
  int64_t num_unscheduled(const Request& req) const;
  int64_t num_tokens_to_schedule(int64_t num_unscheduled, int64_t budget) const;
  bool running_blocks_fit() const;
  void emit(SchedulerOutput& out, Request& req, int64_t start, int64_t num_tokens,
            size_t num_old_blocks, bool is_new);

  // scheduler.cc
  void apply_one(const ScheduledRequest& s, int32_t sampled, std::vector<TokenOutput>& results);
  Request* find_live(RequestId id);
  void check_queues() const;

  SchedulerConfig config_;
  kv::KvCacheManager kv_;
  // Every live (unfinished) request; running_ and waiting_ point into it.
  std::unordered_map<RequestId, std::unique_ptr<Request>> requests_;
  std::vector<Request*> running_;  // arrival order; back() is the preemption victim
  std::deque<Request*> waiting_;   // arrival order; preempted requests return to the front
  std::vector<RequestId> finished_since_schedule_;
  uint64_t next_arrival_seq_ = 0;
  int64_t num_preemptions_total_ = 0;
  int num_steps_in_flight_ = 0;
};

}  // namespace s4kv::engine
