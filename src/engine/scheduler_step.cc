// Scheduler::schedule (see scheduler.h): one step's flat batch. Running requests are served
// first, in arrival order, each asking for the tokens it is missing (a decode token or the next
// prefill chunk); a running request that cannot get blocks preempts the latest-arrived running
// request until it can, or is itself the victim. Waiting requests are admitted afterwards, in
// order, while token budget, seats and blocks remain, and never in a step that preempted.
// schedule_ahead plans the same way on top of a step in flight, without preempting.
#include <algorithm>
#include <utility>

#include "engine/scheduler.h"

namespace s4kv::engine {

SchedulerOutput Scheduler::schedule() {
  S4KV_CHECK(num_steps_in_flight_ == 0,
             "schedule() with a step in flight (update_from_output() first, or schedule_ahead())");
  return plan(/*ahead=*/false);
}

std::optional<SchedulerOutput> Scheduler::schedule_ahead() {
  S4KV_CHECK(num_steps_in_flight_ == 1, "schedule_ahead() with ", num_steps_in_flight_,
             " steps in flight (exactly one)");
  if (!running_blocks_fit()) return std::nullopt;
  return plan(/*ahead=*/true);
}

SchedulerOutput Scheduler::plan(bool ahead) {
  SchedulerOutput out;
  out.finished_ids = std::exchange(finished_since_schedule_, {});
  int64_t budget = config_.max_num_batched_tokens;
  schedule_running(out, budget, ahead);
  // Admitting while running requests are being evicted for memory would only thrash: the newcomer
  // would take blocks that an older request needs next step (vLLM v1 does the same).
  if (out.preempted_ids.empty()) schedule_waiting(out, budget);
  if (!out.scheduled.empty()) ++num_steps_in_flight_;
  return out;
}

int64_t Scheduler::num_unscheduled(const Request& req) const {
  const int64_t num_tokens = req.num_tokens_with_placeholders();
  // A step in flight samples the request's final token (max_model_len or max_tokens).
  if (req.num_output_placeholders() > 0 &&
      (num_tokens >= config_.max_model_len ||
       req.num_output_tokens() + req.num_output_placeholders() >= req.max_output_tokens())) {
    return 0;
  }
  return num_tokens - req.num_computed_tokens();
}

int64_t Scheduler::num_tokens_to_schedule(int64_t num_unscheduled, int64_t budget) const {
  int64_t n = num_unscheduled;
  if (config_.long_prefill_token_threshold > 0) {
    n = std::min(n, config_.long_prefill_token_threshold);
  }
  return std::min(n, budget);
}

// What schedule_running would allocate, without preempting: true when every running request it
// would serve gets its blocks.
bool Scheduler::running_blocks_fit() const {
  int64_t budget = config_.max_num_batched_tokens, blocks = 0;
  for (const Request* req : running_) {
    if (budget <= 0) break;
    const int64_t n = num_tokens_to_schedule(num_unscheduled(*req), budget);
    if (n == 0) continue;
    blocks += kv_.num_new_blocks(req->request_id(), n);
    budget -= n;
  }
  return blocks <= kv_.num_available_blocks();
}

void Scheduler::schedule_running(SchedulerOutput& out, int64_t& budget, bool ahead) {
  // Index-based: preemption pops running_.back(), which is never before i.
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Request& req = *running_[i];
    const int64_t start = req.num_computed_tokens();
    const int64_t n = num_tokens_to_schedule(num_unscheduled(req), budget);
    if (ahead && n == 0) continue;  // its last token is in flight
    S4KV_CHECK(n > 0, "running request ", req.request_id(), " has nothing to compute");
    const size_t num_old_blocks = kv_.block_table(req.request_id()).size();
    if (ahead) {
      S4KV_CHECK(kv_.allocate_slots(req.request_id(), n), "schedule_ahead: request ",
                 req.request_id(), " did not get the blocks running_blocks_fit() counted");
    } else if (!allocate_or_preempt(req, n, out)) {
      break;  // req itself was preempted: it was last
    }
    emit(out, req, start, n, num_old_blocks, /*is_new=*/false);
    budget -= n;
  }
}

bool Scheduler::allocate_or_preempt(Request& req, int64_t num_new_tokens, SchedulerOutput& out) {
  while (!kv_.allocate_slots(req.request_id(), num_new_tokens)) {
    const bool victim_is_req = running_.back() == &req;
    preempt_last_running(out);
    if (victim_is_req) return false;
  }
  return true;
}

void Scheduler::preempt_last_running(SchedulerOutput& out) {
  Request* victim = running_.back();
  running_.pop_back();
  kv_.free(victim->request_id());
  victim->reset_for_recompute();
  // The victim arrived after every other running request and before every waiting one, so the
  // front keeps the waiting queue in arrival order and it is resumed first.
  waiting_.push_front(victim);
  out.preempted_ids.push_back(victim->request_id());
  ++num_preemptions_total_;
}

void Scheduler::schedule_waiting(SchedulerOutput& out, int64_t& budget) {
  while (!waiting_.empty() && budget > 0 &&
         static_cast<int>(running_.size()) < config_.max_num_seqs) {
    Request& req = *waiting_.front();
    // A resumed request looks up its outputs too: its own blocks may still be cached.
    const kv::ComputedBlocks computed = kv_.get_computed_blocks(req.all_token_ids());
    const int64_t start = computed.num_computed_tokens;
    const int64_t wanted = req.num_tokens() - start;
    if (!config_.enable_chunked_prefill && wanted > budget) break;
    const int64_t n = num_tokens_to_schedule(wanted, budget);
    // Strict FCFS: when the head does not fit, nobody behind it is admitted either.
    if (!kv_.allocate_slots(req.request_id(), n, computed)) break;
    waiting_.pop_front();
    req.set_num_computed_tokens(start);
    req.set_status(RequestStatus::kRunning);
    running_.push_back(&req);
    emit(out, req, start, n, computed.blocks.size(), /*is_new=*/true);
    budget -= n;
  }
}

void Scheduler::emit(SchedulerOutput& out, Request& req, int64_t start, int64_t num_tokens,
                     size_t num_old_blocks, bool is_new) {
  S4KV_CHECK(start + num_tokens <= config_.max_model_len, "request ", req.request_id(),
             " scheduled past max_model_len");
  const std::span<const kv::BlockId> table = kv_.block_table(req.request_id());
  ScheduledRequest s;
  s.request_id = req.request_id();
  s.num_computed_tokens = start;
  s.num_scheduled_tokens = num_tokens;
  // Known tokens, then the placeholder a step in flight samples (schedule_ahead only).
  const int64_t num_known = std::clamp<int64_t>(req.num_tokens() - start, 0, num_tokens);
  const std::span<const int32_t> tokens =
      req.all_token_ids().subspan(static_cast<size_t>(start), static_cast<size_t>(num_known));
  s.token_ids.assign(tokens.begin(), tokens.end());
  s.token_ids.resize(static_cast<size_t>(num_tokens), kPlaceholderTokenId);
  S4KV_CHECK(num_tokens - num_known <= 1, "request ", req.request_id(),
             " scheduled past its one placeholder");
  s.block_table.assign(table.begin(), table.end());
  s.new_block_ids.assign(table.begin() + static_cast<std::ptrdiff_t>(num_old_blocks), table.end());
  s.seat = kv_.seat(req.request_id());
  s.is_new = is_new;
  s.samples = start + num_tokens == req.num_tokens_with_placeholders();
  req.set_num_computed_tokens(start + num_tokens);
  if (s.samples) req.add_output_placeholder();
  out.total_num_scheduled_tokens += num_tokens;
  out.scheduled.push_back(std::move(s));
}

}  // namespace s4kv::engine
