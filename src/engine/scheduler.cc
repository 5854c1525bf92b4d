// Scheduler: configuration checks, the request life cycle (add, finish, abort), applying a
// step's results, and the invariant checks. Planning a step is in scheduler_step.cc.
#include "engine/scheduler.h"

#include <algorithm>
#include <string>
#include <utility>

namespace s4kv::engine {

Status Scheduler::validate(const SchedulerConfig& config, const CacheConfig& cache) {
  auto bad = [](const char* field, int64_t value, const std::string& need) {
    return invalid_argument(std::string(field) + "=" + std::to_string(value) + ": " + need);
  };
  if (config.max_num_seqs < 1) return bad("max_num_seqs", config.max_num_seqs, "must be >= 1");
  if (config.max_num_batched_tokens < 1) {
    return bad("max_num_batched_tokens", config.max_num_batched_tokens, "must be >= 1");
  }
  if (config.max_model_len < 1) return bad("max_model_len", config.max_model_len, "must be >= 1");
  if (config.long_prefill_token_threshold < 0) {
    return bad("long_prefill_token_threshold", config.long_prefill_token_threshold,
               "must be >= 0 (0 = off)");
  }
  if (cache.block_size < 1) return bad("block_size", cache.block_size, "must be >= 1");
  if (cache.num_blocks < 1) return bad("num_blocks", cache.num_blocks, "must be >= 1");
  // Pool blocks for one sequence of max_model_len (and its seat's); its first block comes from
  // the sink pool when there is one.
  const bool sinks = cache.num_sink_blocks > 0;
  const int64_t sink_run = sinks ? cache.sink_run_blocks : 0;  // a sequence's sink's run
  const int64_t blocks_needed = blocks_per_sequence(config.max_model_len, cache);
  // The seats' runs and the sink runs (the dummy block's among them) at the top of the pool.
  const int64_t run_blocks = int64_t{config.max_num_seqs} * cache.blocks_per_seat +
                             int64_t{cache.num_sink_blocks + 1} * sink_run;
  if (cache.num_sink_blocks < 0)
    return bad("num_sink_blocks", cache.num_sink_blocks, "must be >= 0");
  if (cache.blocks_per_seat < 0)
    return bad("blocks_per_seat", cache.blocks_per_seat, "must be >= 0");
  if (cache.sink_run_blocks < 0)
    return bad("sink_run_blocks", cache.sink_run_blocks, "must be >= 0");
  if (run_blocks > cache.num_blocks) {
    return bad("max_num_seqs", config.max_num_seqs,
               "the 16-bit residual rings and sink blocks of that many running sequences take " +
                   std::to_string(run_blocks) + " KV blocks but the KV cache has " +
                   std::to_string(cache.num_blocks) +
                   "; lower --max-num-seqs or give the KV cache more memory "
                   "(--kv-cache-memory, or --gpu-memory-utilization on cuda)");
  }
  if (blocks_needed > cache.num_blocks) {
    const int64_t tokens = (cache.num_blocks - cache.blocks_per_seat + (sinks ? 1 : 0) - sink_run) *
                           int64_t{cache.block_size};
    return bad("max_model_len", config.max_model_len,
               "one sequence of this length needs " + std::to_string(blocks_needed) +
                   " KV blocks of " + std::to_string(cache.block_size) +
                   " tokens but the KV cache has " + std::to_string(cache.num_blocks) +
                   ": the most tokens one sequence can hold is " + std::to_string(tokens) +
                   "; lower --max-model-len or give the KV cache more memory "
                   "(--kv-cache-memory, or --gpu-memory-utilization on cuda)");
  }
  if (!config.enable_chunked_prefill && config.max_num_batched_tokens < config.max_model_len) {
    return bad("max_num_batched_tokens", config.max_num_batched_tokens,
               "without chunked prefill it must be >= max_model_len (" +
                   std::to_string(config.max_model_len) + ")");
  }
  return Status::ok();
}

int64_t Scheduler::blocks_per_sequence(int64_t tokens, const CacheConfig& cache) {
  const bool sinks = cache.num_sink_blocks > 0;
  return (tokens + cache.block_size - 1) / cache.block_size - (sinks ? 1 : 0) +
         cache.blocks_per_seat + (sinks ? cache.sink_run_blocks : 0);
}

Scheduler::Scheduler(const SchedulerConfig& config, const CacheConfig& cache)
    : config_(config),
      kv_(cache.num_blocks, cache.block_size, cache.enable_prefix_caching, cache.hash_salt,
          cache.num_sink_blocks, config.max_num_seqs, cache.blocks_per_seat,
          cache.sink_run_blocks) {
  const Status s = validate(config, cache);
  S4KV_CHECK(s.is_ok(), "unvalidated scheduler config: ", s.message());
}

Status Scheduler::add_request(RequestId id, std::vector<int32_t> prompt_token_ids,
                              int64_t max_output_tokens) {
  if (prompt_token_ids.empty()) return invalid_argument("the prompt is empty");
  const auto num_prompt = static_cast<int64_t>(prompt_token_ids.size());
  // By validate(), every prompt within max_model_len also fits the whole KV cache alone, so this
  // one check also refuses prompts that could never be admitted.
  if (num_prompt > config_.max_model_len) {
    return invalid_argument(
        "the prompt has " + std::to_string(num_prompt) +
        " tokens, more than max_model_len=" + std::to_string(config_.max_model_len));
  }
  if (requests_.contains(id)) {
    return invalid_argument("request id " + std::to_string(id) + " is already in use");
  }
  if (max_output_tokens < 1) {
    return invalid_argument("max_output_tokens=" + std::to_string(max_output_tokens) +
                            " must be >= 1");
  }
  auto req = std::make_unique<Request>(id, std::move(prompt_token_ids), next_arrival_seq_++);
  req->set_max_output_tokens(max_output_tokens);
  waiting_.push_back(req.get());
  requests_.emplace(id, std::move(req));
  return Status::ok();
}

Request* Scheduler::find_live(RequestId id) {
  const auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : it->second.get();
}

const Request* Scheduler::get_request(RequestId id) const {
  const auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : it->second.get();
}

std::vector<TokenOutput> Scheduler::update_from_output(const SchedulerOutput& out,
                                                       std::span<const int32_t> sampled) {
  S4KV_CHECK(sampled.size() == out.scheduled.size(), "sampled ", sampled.size(), " tokens for ",
             out.scheduled.size(), " scheduled requests");
  std::vector<TokenOutput> results;
  if (out.scheduled.empty()) return results;
  S4KV_CHECK(num_steps_in_flight_ > 0, "update_from_output() without a step in flight");
  for (size_t i = 0; i < out.scheduled.size(); ++i)
    apply_one(out.scheduled[i], sampled[i], results);
  --num_steps_in_flight_;
  return results;
}

void Scheduler::apply_one(const ScheduledRequest& s, int32_t sampled,
                          std::vector<TokenOutput>& results) {
  Request* req = find_live(s.request_id);
  if (req == nullptr) return;  // finished or aborted after schedule(): its blocks are gone
  const int64_t end = s.num_computed_tokens + s.num_scheduled_tokens;
  // Steps apply in schedule order, so a placeholder this step computed was replaced by the
  // previous step's token already: every token up to `end` is known.
  S4KV_CHECK(req->status() == RequestStatus::kRunning && req->num_computed_tokens() >= end &&
                 req->num_tokens() >= end,
             "request ", s.request_id, " changed between schedule() and update_from_output()");
  // Only now is the KV written, so only now may other requests find these blocks.
  kv_.cache_blocks(req->request_id(), req->all_token_ids(), end);
  if (!s.samples) return;  // a partial prefill chunk: its logits are not a next token
  req->append_output_token(sampled);
  TokenOutput result{s.request_id, sampled, std::nullopt};
  if (req->num_tokens() >= config_.max_model_len) {
    result.finish_reason = FinishReason::kLength;
    (void)finish(s.request_id, FinishReason::kLength);
  }
  results.push_back(result);
}

std::unique_ptr<Request> Scheduler::finish(RequestId id, FinishReason reason) {
  const auto it = requests_.find(id);
  if (it == requests_.end()) return nullptr;
  Request* req = it->second.get();
  if (req->status() == RequestStatus::kRunning) {
    running_.erase(std::find(running_.begin(), running_.end(), req));
  } else {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), req));
  }
  kv_.free(id);  // a no-op for waiting and preempted requests, which hold no blocks
  req->set_status(finished_status(reason));
  finished_since_schedule_.push_back(id);
  std::unique_ptr<Request> owned = std::move(it->second);
  requests_.erase(it);
  return owned;
}

bool Scheduler::abort(RequestId id) { return finish(id, FinishReason::kAbort) != nullptr; }

void Scheduler::check_queues() const {
  S4KV_CHECK(running_.size() + waiting_.size() == requests_.size(), "running ", running_.size(),
             " + waiting ", waiting_.size(), " != live ", requests_.size());
  S4KV_CHECK(static_cast<int>(running_.size()) <= config_.max_num_seqs, "too many running");
  auto by_arrival = [](const Request* a, const Request* b) {
    return a->arrival_seq() < b->arrival_seq();
  };
  S4KV_CHECK(std::is_sorted(running_.begin(), running_.end(), by_arrival), "running unordered");
  S4KV_CHECK(std::is_sorted(waiting_.begin(), waiting_.end(), by_arrival), "waiting unordered");
  S4KV_CHECK(running_.empty() || waiting_.empty() ||
                 running_.back()->arrival_seq() < waiting_.front()->arrival_seq(),
             "a waiting request arrived before a running one");
}

void Scheduler::check_invariants() const {
  kv_.check_invariants();
  check_queues();
  for (const Request* r : running_) {
    S4KV_CHECK(r->status() == RequestStatus::kRunning && kv_.has_request(r->request_id()),
               "running request ", r->request_id(), " without blocks");
    // The table has slots for exactly the scheduled tokens; with no step in flight there are
    // no placeholders and every running request has at least its last token left to compute.
    S4KV_CHECK(kv_.num_tokens(r->request_id()) == r->num_computed_tokens() &&
                   r->num_computed_tokens() <= r->num_tokens_with_placeholders() &&
                   (num_steps_in_flight_ > 0 || (r->num_output_placeholders() == 0 &&
                                                 r->num_computed_tokens() < r->num_tokens())),
               "running request ", r->request_id(), " out of step with its blocks");
  }
  for (const Request* r : waiting_) {
    S4KV_CHECK(
        (r->status() == RequestStatus::kWaiting || r->status() == RequestStatus::kPreempted) &&
            !kv_.has_request(r->request_id()) && r->num_computed_tokens() == 0,
        "waiting request ", r->request_id(), " holds blocks or computed tokens");
  }
  S4KV_CHECK(kv_.num_requests() == num_running(), "the KV manager has tables for ",
             kv_.num_requests(), " requests but ", num_running(), " run");
}

}  // namespace s4kv::engine
