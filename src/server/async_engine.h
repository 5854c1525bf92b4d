// AsyncEngine: the engine thread and the only door to it. It owns the LlmEngine (EngineCore,
// scheduler, KV pool, backend); HTTP threads never touch those. They submit requests and
// aborts through a mutex-guarded inbox, and read each request's progress from its own
// RequestChannel, which the engine thread fills after every step.
//
// Engine thread loop: take the inbox (add requests, abort tickets) -> step() while requests
// are unfinished -> publish the gauges (after every step, and after the inbox when no step
// runs, so an idle engine shows its true state) -> push each RequestOutput onto its channel
// and update the other metrics -> beat the heart.
// Idle, it sleeps on a condition variable (woken by submit/abort, and at least every 100 ms
// to beat). One log line per finished request: id, prompt and generated tokens, time to
// first token, total time, finish reason; and every stats_interval a throughput line.
//
// Request ids given by callers (e.g. "chatcmpl-...") are for logs only; tickets identify
// requests here.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "engine/engine_core.h"
#include "engine/llm_engine.h"
#include "engine/sampling_params.h"
#include "server/metrics.h"
#include "server/stats_logger.h"

namespace s4kv::server {

// One message from the engine thread to a request's consumer.
struct EngineEvent {
  // Progress of the request's sequences in one step (RequestOutput::finished on the last).
  std::optional<engine::RequestOutput> output;
  // Set instead when the request ends without finishing: aborted at shutdown
  // (kUnavailable, "the server is shutting down"), or refused by the engine (the engine's
  // Status). Nothing follows it.
  std::optional<Status> error;
};

// A request's events, in order. Single producer (the engine thread), single consumer.
class RequestChannel {
 public:
  // notify runs on the engine thread after pushes (at most once per step); it must be quick
  // and thread-safe, e.g. HttpExchange::post of a function that calls take(). It may run
  // after the consumer has taken the last event, so it must own (shared_ptr/weak_ptr) what
  // it touches rather than point at the consumer.
  explicit RequestChannel(std::function<void()> notify);

  void push(EngineEvent event);     // engine thread; then calls notify
  std::vector<EngineEvent> take();  // consumer: every event pushed since the last take

 private:
  std::function<void()> notify_;
  std::mutex mu_;
  std::vector<EngineEvent> events_;
};

struct EngineRequest {
  std::string id;  // for the log line: "chatcmpl-...", "cmpl-...-0"
  std::vector<int32_t> prompt_token_ids;
  engine::SamplingParams params;  // validated by the caller (SamplingParams::validate)
  std::shared_ptr<RequestChannel> channel;
  std::chrono::steady_clock::time_point arrival = std::chrono::steady_clock::now();
};

enum class EngineState { kReady, kDraining, kStopped };

struct AsyncEngineOptions {
  // Sequences waiting (submitted, not yet running: a request of n sequences counts n) that
  // the engine takes at most (--max-queued-requests). A submission that does not fit now is
  // refused with kResourceExhausted (HTTP 503 with Retry-After); one that can never fit (more
  // sequences than this) with kInvalidArgument (HTTP 400).
  int64_t max_queued_requests = 1024;
  // healthy() turns false when the engine loop has not beaten for this long.
  std::chrono::milliseconds heartbeat_timeout{30000};
  // The log line per finished request (--disable-log-requests turns it off).
  bool log_requests = true;
  // How often the engine logs its throughput line (stats_logger.h); zero: never
  // (--disable-log-stats).
  std::chrono::milliseconds stats_interval{10000};
};

// The KV capacity gauges of an engine (Metrics' constructor argument), from its resolved
// config. Call before moving the engine into AsyncEngine.
KvCapacityInfo kv_capacity_info(const engine::LlmEngine& engine);

class AsyncEngine {
 public:
  // Takes the loaded engine and starts the engine thread. `metrics` must outlive this.
  AsyncEngine(engine::LlmEngine engine, AsyncEngineOptions options, Metrics& metrics);
  ~AsyncEngine();  // shutdown(now) when still running
  AsyncEngine(const AsyncEngine&) = delete;
  AsyncEngine& operator=(const AsyncEngine&) = delete;

  // Any thread. Queues the requests together (one API request's prompts), all or none, and
  // returns their tickets in order. Admission counts sequences (params.n per request): the
  // requests are refused when the sequences already waiting plus theirs exceed
  // max_queued_requests (kResourceExhausted), or when theirs alone do (kInvalidArgument).
  // kUnavailable while draining or stopped.
  Result<std::vector<uint64_t>> submit_all(std::vector<EngineRequest> requests);
  // submit_all of one request.
  Result<uint64_t> submit(EngineRequest request);
  // Any thread. Ends the request in the engine and frees its KV blocks; no event follows.
  // Unknown or finished tickets are ignored.
  void abort(uint64_t ticket);

  // Any thread.
  EngineState state() const { return state_.load(); }
  // kReady and the loop beat within heartbeat_timeout.
  bool healthy() const;
  // Stop taking requests (submit -> kUnavailable); running and queued ones go on.
  void begin_drain();
  // Blocks until every request has finished or the deadline passes; then aborts what is left
  // (each gets an error event: kUnavailable, "the server is shutting down") and stops the
  // engine thread. Idempotent.
  void shutdown(std::chrono::steady_clock::time_point deadline);
  // Requests submitted and not yet ended.
  int64_t num_unfinished() const { return num_unfinished_.load(); }

  // Immutable after construction; any thread.
  const tokenizer::Tokenizer& tokenizer() const { return *engine_.tokenizer; }
  const model::ModelConfig& model_config() const { return engine_.model_config; }
  const engine::GenerationConfig& generation_config() const { return engine_.generation_config; }
  const std::string& model_dir() const { return engine_.model_dir; }
  int64_t max_model_len() const { return max_model_len_; }
  int64_t vocab_size() const { return vocab_size_; }
  // Most sequences that may wait (AsyncEngineOptions::max_queued_requests).
  int64_t max_queued_sequences() const { return options_.max_queued_requests; }

 private:
  struct Live;  // engine-thread bookkeeping of one request

  void run();  // the engine thread
  // Adds submitted requests and applies aborts; false once stop_ is set (the inbox's
  // requests then get `stopping` as their error).
  bool take_inbox();
  void add_one(uint64_t ticket, EngineRequest request);
  // Sequences this step finished leave num_unfinished_seqs_ (before publish_state).
  void count_finished_sequences(const std::vector<engine::RequestOutput>& outputs);
  void dispatch(std::vector<engine::RequestOutput>& outputs);
  void observe_tokens(Live& live, const engine::RequestOutput& output,
                      std::chrono::steady_clock::time_point now);
  void publish_state();
  void end_request(uint64_t ticket, std::string_view finish_reason);
  void abort_all(const Status& reason);
  void finish_ticket();  // a submitted request ended: num_unfinished_ - 1
  void beat();

  engine::LlmEngine engine_;
  AsyncEngineOptions options_;
  Metrics& metrics_;
  int64_t max_model_len_ = 0;
  int64_t vocab_size_ = 0;

  // Inbox: guarded by mu_.
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::pair<uint64_t, EngineRequest>> submitted_;
  int64_t num_submitted_seqs_ = 0;  // sequences of submitted_
  std::vector<uint64_t> aborted_;
  bool stop_ = false;
  uint64_t next_ticket_ = 1;
  std::condition_variable drained_;  // num_unfinished_ reached 0 (waited on with mu_)

  std::mutex shutdown_mu_;  // serializes shutdown() callers

  std::atomic<EngineState> state_{EngineState::kReady};
  // Sequences taken from the inbox and not running (waiting or preempted in the scheduler,
  // or held by the engine until their prompt is computed): raised as the inbox is taken, set
  // after every step to num_unfinished_seqs_ minus the scheduler's running count. submit_all()
  // adds the inbox's sequences.
  std::atomic<int64_t> num_waiting_{0};
  std::atomic<int64_t> num_unfinished_{0};
  std::atomic<int64_t> last_beat_ns_{0};  // steady_clock, nanoseconds

  // Engine thread only.
  std::unordered_map<uint64_t, std::unique_ptr<Live>> live_;   // by ticket
  std::unordered_map<engine::RequestId, uint64_t> ticket_of_;  // engine id -> ticket
  std::optional<StatsLogger> stats_;                           // null: no throughput lines
  int64_t num_unfinished_seqs_ = 0;  // sequences of live_ that have not finished

  std::thread thread_;
};

}  // namespace s4kv::server
