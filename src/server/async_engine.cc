// AsyncEngine and RequestChannel: the engine thread's loop and the queues around it.
//
// Invariants: only the engine thread calls EngineCore and touches live_/ticket_of_; a ticket
// is in live_ exactly while its request is in the EngineCore; num_unfinished_ counts tickets
// handed out by submit() whose request has not ended (finished, aborted, refused), and it
// drops only after the request's last event is pushed. Admission counts sequences: the
// inbox's (num_submitted_seqs_) plus num_waiting_, which after every step is the unfinished
// sequences of live_ (num_unfinished_seqs_, lowered before the gauges are published) minus
// the running ones. Metrics: prompt tokens and queue time (arrival to add_request: the inbox
// wait, not the scheduler's waiting queue) when a request is added; generation tokens, time
// to first token and inter-token latency per step; finish counters and e2e latency when it
// ends.
// Threads: submit/abort/begin_drain/shutdown from any thread (inbox under mu_); run() and
// everything it calls on the engine thread.
#include "server/async_engine.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "common/check.h"
#include "common/log.h"
#include "engine/finish_reason.h"

namespace s4kv::server {
namespace {

using Clock = std::chrono::steady_clock;

// The engine loop beats at least this often when idle.
constexpr std::chrono::milliseconds kHeartbeatInterval{100};

double seconds_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

Status shutting_down() { return Status(StatusCode::kUnavailable, "the server is shutting down"); }

}  // namespace

struct AsyncEngine::Live {
  std::string id;
  std::shared_ptr<RequestChannel> channel;
  engine::RequestId engine_id = 0;
  Clock::time_point arrival;
  std::optional<Clock::time_point> first_token;
  Clock::time_point last_token;
  int64_t num_prompt_tokens = 0;
  int64_t num_generated = 0;
  int64_t num_unfinished_seqs = 0;                  // of its n sequences
  std::optional<engine::FinishReason> seq0_finish;  // sequence 0's, once it has ended
};

RequestChannel::RequestChannel(std::function<void()> notify) : notify_(std::move(notify)) {}

void RequestChannel::push(EngineEvent event) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(event));
  }
  if (notify_) notify_();
}

std::vector<EngineEvent> RequestChannel::take() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<EngineEvent> out;
  out.swap(events_);
  return out;
}

KvCapacityInfo kv_capacity_info(const engine::LlmEngine& engine) {
  S4KV_CHECK(engine.engine != nullptr, "kv_capacity_info on an empty LlmEngine");
  const kv::KvCapacity& c = engine.engine->config().capacity;
  KvCapacityInfo info;
  info.capacity_tokens = c.num_tokens;
  info.bytes_per_token =
      c.block_size > 0 ? static_cast<double>(c.bytes_per_block) / c.block_size : 0.0;
  info.density_ratio = c.density;
  return info;
}

AsyncEngine::AsyncEngine(engine::LlmEngine engine, AsyncEngineOptions options, Metrics& metrics)
    : engine_(std::move(engine)), options_(options), metrics_(metrics) {
  S4KV_CHECK(engine_.engine != nullptr && engine_.tokenizer != nullptr,
             "AsyncEngine needs a loaded engine");
  max_model_len_ = engine_.engine->max_model_len();
  vocab_size_ = engine_.engine->vocab_size();
  if (options_.stats_interval.count() > 0) stats_.emplace(options_.stats_interval, Clock::now());
  beat();
  publish_state();
  thread_ = std::thread([this] { run(); });
}

AsyncEngine::~AsyncEngine() { shutdown(Clock::now()); }

Result<std::vector<uint64_t>> AsyncEngine::submit_all(std::vector<EngineRequest> requests) {
  int64_t num_seqs = 0;
  for (const EngineRequest& r : requests) {
    S4KV_CHECK(r.channel != nullptr, "submit without a channel");
    num_seqs += std::max<int64_t>(r.params.n, 1);
  }
  const int64_t limit = options_.max_queued_requests;
  if (num_seqs > limit) {
    return invalid_argument("the request makes " + std::to_string(num_seqs) +
                            " sequences (prompts x n) and at most " + std::to_string(limit) +
                            " may wait (--max-queued-requests)");
  }
  std::vector<uint64_t> tickets;
  tickets.reserve(requests.size());
  {
    std::lock_guard<std::mutex> lock(mu_);
    const EngineState state = state_.load();
    if (state == EngineState::kDraining) {
      return Status(StatusCode::kUnavailable, "the server is draining and takes no new requests");
    }
    if (state == EngineState::kStopped || stop_) return shutting_down();
    const int64_t waiting = num_submitted_seqs_ + num_waiting_.load();
    if (waiting + num_seqs > limit) {
      return Status(StatusCode::kResourceExhausted,
                    "too many sequences waiting (" + std::to_string(waiting) + " + " +
                        std::to_string(num_seqs) + " of this request > " + std::to_string(limit) +
                        ", --max-queued-requests); retry later");
    }
    for (EngineRequest& r : requests) {
      tickets.push_back(next_ticket_++);
      submitted_.emplace_back(tickets.back(), std::move(r));
    }
    num_submitted_seqs_ += num_seqs;
    num_unfinished_.fetch_add(static_cast<int64_t>(tickets.size()));
  }
  wake_.notify_one();
  return tickets;
}

Result<uint64_t> AsyncEngine::submit(EngineRequest request) {
  std::vector<EngineRequest> one;
  one.push_back(std::move(request));
  S4KV_ASSIGN_OR_RETURN(std::vector<uint64_t> tickets, submit_all(std::move(one)));
  return tickets.front();
}

void AsyncEngine::abort(uint64_t ticket) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;  // the engine thread is gone or about to abort everything
    aborted_.push_back(ticket);
  }
  wake_.notify_one();
}

bool AsyncEngine::healthy() const {
  if (state_.load() != EngineState::kReady) return false;
  const int64_t now_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
  const int64_t timeout_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(options_.heartbeat_timeout).count();
  return now_ns - last_beat_ns_.load() <= timeout_ns;
}

void AsyncEngine::begin_drain() {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_.load() == EngineState::kReady) state_.store(EngineState::kDraining);
}

void AsyncEngine::shutdown(std::chrono::steady_clock::time_point deadline) {
  std::lock_guard<std::mutex> serial(shutdown_mu_);
  if (!thread_.joinable()) {
    state_.store(EngineState::kStopped);
    return;
  }
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (state_.load() == EngineState::kReady) state_.store(EngineState::kDraining);
    drained_.wait_until(lock, deadline, [this] { return num_unfinished_.load() == 0; });
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
  state_.store(EngineState::kStopped);
}

void AsyncEngine::run() {
  engine::EngineCore& core = *engine_.engine;
  while (true) {
    beat();
    if (!take_inbox()) break;
    if (core.has_unfinished()) {
      std::vector<engine::RequestOutput> outputs = core.step();
      // Gauges first: a consumer woken by its event already reads the state after the step
      // (submit's queue limit among them).
      count_finished_sequences(outputs);
      publish_state();
      dispatch(outputs);
      continue;
    }
    publish_state();
    std::unique_lock<std::mutex> lock(mu_);
    wake_.wait_for(lock, kHeartbeatInterval,
                   [this] { return stop_ || !submitted_.empty() || !aborted_.empty(); });
  }
  abort_all(shutting_down());
  publish_state();
}

bool AsyncEngine::take_inbox() {
  std::deque<std::pair<uint64_t, EngineRequest>> submitted;
  std::vector<uint64_t> aborted;
  bool stop = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    submitted.swap(submitted_);
    aborted.swap(aborted_);
    stop = stop_;
    if (!stop) num_waiting_.fetch_add(num_submitted_seqs_);
    num_submitted_seqs_ = 0;
  }
  if (stop) {
    // Never added: they end here with the shutdown error, as the live ones will.
    for (auto& [ticket, request] : submitted) {
      request.channel->push(EngineEvent{std::nullopt, shutting_down()});
      finish_ticket();
    }
    return false;
  }
  for (auto& [ticket, request] : submitted) add_one(ticket, std::move(request));
  for (uint64_t ticket : aborted) {
    auto it = live_.find(ticket);
    if (it == live_.end()) continue;  // unknown, refused or already ended
    engine_.engine->abort(it->second->engine_id);
    end_request(ticket, engine::finish_reason_name(engine::FinishReason::kAbort));
  }
  return true;
}

void AsyncEngine::add_one(uint64_t ticket, EngineRequest request) {
  const Clock::time_point now = Clock::now();
  const auto num_prompt_tokens = static_cast<int64_t>(request.prompt_token_ids.size());
  Result<engine::RequestId> id =
      engine_.engine->add_request(std::move(request.prompt_token_ids), request.params);
  if (!id.is_ok()) {
    log_warn("engine", "request " + request.id + " refused: " + id.status().message());
    request.channel->push(EngineEvent{std::nullopt, id.status()});
    finish_ticket();
    return;
  }
  auto live = std::make_unique<Live>();
  live->id = std::move(request.id);
  live->channel = std::move(request.channel);
  live->engine_id = *id;
  live->arrival = request.arrival;
  live->num_prompt_tokens = num_prompt_tokens;
  live->num_unfinished_seqs = std::max<int64_t>(request.params.n, 1);
  num_unfinished_seqs_ += live->num_unfinished_seqs;
  metrics_.add_prompt_tokens(num_prompt_tokens);
  metrics_.observe_queue_time(seconds_between(request.arrival, now));
  ticket_of_[*id] = ticket;
  live_[ticket] = std::move(live);
}

void AsyncEngine::dispatch(std::vector<engine::RequestOutput>& outputs) {
  const Clock::time_point now = Clock::now();
  for (engine::RequestOutput& output : outputs) {
    const auto it = ticket_of_.find(output.request_id);
    S4KV_CHECK(it != ticket_of_.end(), "output for unknown request ", output.request_id);
    const uint64_t ticket = it->second;
    Live& live = *live_.at(ticket);
    observe_tokens(live, output, now);
    const bool finished = output.finished;
    live.channel->push(EngineEvent{std::move(output), std::nullopt});
    if (finished) {
      end_request(ticket, engine::finish_reason_name(
                              live.seq0_finish.value_or(engine::FinishReason::kStop)));
    }
  }
}

void AsyncEngine::count_finished_sequences(const std::vector<engine::RequestOutput>& outputs) {
  for (const engine::RequestOutput& output : outputs) {
    const auto it = ticket_of_.find(output.request_id);
    if (it == ticket_of_.end()) continue;  // dispatch() checks it
    Live& live = *live_.at(it->second);
    for (const engine::CompletionOutput& co : output.outputs) {
      if (co.finish_reason && live.num_unfinished_seqs > 0) {
        --live.num_unfinished_seqs;
        --num_unfinished_seqs_;
      }
    }
  }
}

void AsyncEngine::observe_tokens(Live& live, const engine::RequestOutput& output,
                                 Clock::time_point now) {
  int64_t num_new = 0;
  for (const engine::CompletionOutput& co : output.outputs) {
    num_new += static_cast<int64_t>(co.token_ids.size());
    if (co.index == 0 && co.finish_reason) live.seq0_finish = co.finish_reason;
  }
  if (num_new == 0) return;
  live.num_generated += num_new;
  metrics_.add_generation_tokens(num_new);
  if (!live.first_token) {
    live.first_token = now;
    metrics_.observe_time_to_first_token(seconds_between(live.arrival, now));
  } else {
    metrics_.observe_inter_token_latency(seconds_between(live.last_token, now));
  }
  live.last_token = now;
}

void AsyncEngine::publish_state() {
  const engine::Scheduler& s = engine_.engine->scheduler();
  int64_t inbox = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    inbox = static_cast<int64_t>(submitted_.size());
  }
  // Not running: waiting or preempted in the scheduler, or held until their prompt is in.
  num_waiting_.store(std::max<int64_t>(num_unfinished_seqs_ - s.num_running(), 0));
  const kv::BlockPool& pool = s.kv_cache_manager().pool();
  metrics_.set_scheduler_state(s.num_running(), s.num_waiting() + static_cast<int>(inbox),
                               s.kv_cache_usage(), s.num_preemptions_total(),
                               pool.prefix_cache_queries(), pool.prefix_cache_hits());
  const Clock::time_point now = Clock::now();
  if (stats_ && stats_->due(now)) {
    const auto [prompt_tokens, generation_tokens] = metrics_.token_totals();
    const EngineSnapshot snapshot{s.num_running(),          s.num_waiting() + inbox,
                                  s.kv_cache_usage(),       pool.prefix_cache_queries(),
                                  pool.prefix_cache_hits(), prompt_tokens,
                                  generation_tokens};
    if (std::optional<std::string> line = stats_->poll(now, snapshot)) log_info("engine", *line);
  }
}

void AsyncEngine::end_request(uint64_t ticket, std::string_view finish_reason) {
  const auto it = live_.find(ticket);
  S4KV_CHECK(it != live_.end(), "end_request for unknown ticket ", ticket);
  const Live& live = *it->second;
  const Clock::time_point now = Clock::now();
  const double total = seconds_between(live.arrival, now);
  metrics_.on_request_finished(finish_reason, live.num_prompt_tokens, live.num_generated, total);

  if (options_.log_requests) {
    char ttft[32] = "-";
    if (live.first_token) {
      std::snprintf(ttft, sizeof(ttft), "%.3f s", seconds_between(live.arrival, *live.first_token));
    }
    char rest[160];
    std::snprintf(rest, sizeof(rest),
                  ": prompt %lld tokens, generated %lld tokens, ttft %s, total %.3f s, finish ",
                  static_cast<long long>(live.num_prompt_tokens),
                  static_cast<long long>(live.num_generated), ttft, total);
    log_info("engine", "request " + live.id + rest + std::string(finish_reason));
  }

  num_unfinished_seqs_ -= live.num_unfinished_seqs;
  ticket_of_.erase(live.engine_id);
  live_.erase(it);
  finish_ticket();
}

void AsyncEngine::abort_all(const Status& reason) {
  std::vector<uint64_t> tickets;
  tickets.reserve(live_.size());
  for (const auto& [ticket, live] : live_) tickets.push_back(ticket);
  for (uint64_t ticket : tickets) {
    Live& live = *live_.at(ticket);
    engine_.engine->abort(live.engine_id);
    live.channel->push(EngineEvent{std::nullopt, reason});
    end_request(ticket, engine::finish_reason_name(engine::FinishReason::kAbort));
  }
}

void AsyncEngine::finish_ticket() {
  if (num_unfinished_.fetch_sub(1) == 1) {
    // Taking mu_ orders this with shutdown()'s predicate check, so its wait cannot miss it.
    { std::lock_guard<std::mutex> lock(mu_); }
    drained_.notify_all();
  }
}

void AsyncEngine::beat() {
  last_beat_ns_.store(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
          .count());
}

}  // namespace s4kv::server
