// EngineCore: the engine loop of one model (vLLM v1's EngineCore plus its output processing).
// It owns the Scheduler, the ModelRunner (and through it the Backend) and the Sampler, and
// each request's state: its SamplingParams, and per sequence a StopChecker and an incremental
// detokenizer. One step:
//
//   schedule() -> sample rows for the requests that sample -> ModelRunner::execute (forward +
//   sample) -> Scheduler::update_from_output -> per new token: detokenize, stop checks,
//   Scheduler::finish for sequences that ended -> RequestOutputs (text deltas, ids, logprobs)
//
// A request with n > 1 runs as n sequences sharing the prompt, each a scheduler request of
// its own (their full prompt blocks are shared through the prefix cache once computed); its
// outputs are reported by sequence index. Token ids in, token ids and text out: prompts are
// tokenized by the caller. Not thread-safe: the engine thread only.
//
// Async scheduling (--async-scheduling, vLLM's): step() schedules and submits step N+1
// (Scheduler::schedule_ahead, its decode tokens deferred to step N's samples on the device)
// before it waits for step N, then applies N's tokens (detokenize, stop checks) while N+1 runs,
// so the host's work hides behind the device's. Outputs are the synchronous engine's: draws are
// keyed by the output count (placeholders included), a sequence that stops at N drops N+1's
// token, and max_tokens / max_model_len are never scheduled past. It falls back to waiting
// for N before scheduling (a synchronous step) when N has a row whose penalties read the
// output ids, and when the running requests' next tokens need more KV blocks than are free
// (schedule() would preempt). Each step() still returns the outputs of one step.

#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "common/status.h"
#include "engine/engine_config.h"
#include "engine/model_runner.h"
#include "engine/sampler.h"
#include "engine/sampler_rng.h"
#include "engine/sampling_params.h"
#include "engine/scheduler.h"
#include "engine/stop_checker.h"
#include "tokenizer/tokenizer.h"

namespace s4kv::engine {

// What one sequence produced in one step (a delta: concatenated over steps, the output).
struct CompletionOutput {
  int index = 0;                   // 0..n-1
  std::string text;                // newly released text
  std::vector<int32_t> token_ids;  // newly generated ids (one per step)
  // One per new token when the request asked for logprobs.
  std::vector<SampleOutput> logprobs;
  std::optional<FinishReason> finish_reason;  // set in the step the sequence ends
  std::optional<std::string> stop_str;        // the stop string that ended it
  std::optional<int32_t> stop_token_id;       // the stop_token_ids entry that ended it
};

struct RequestOutput {
  RequestId request_id = 0;
  int64_t num_prompt_tokens = 0;
  std::vector<CompletionOutput> outputs;  // sequences that made progress this step
  bool finished = false;                  // every sequence has ended; the id is gone
};

class EngineCore {
 public:
  // `config` comes from resolve_engine_config for the backend's model; `eos_token_ids` are
  // the model's (generation_config.json and config.json). The tokenizer must outlive the
  // engine.
  EngineCore(const ResolvedEngineConfig& config, std::unique_ptr<backend::Backend> backend,
             const tokenizer::Tokenizer& tokenizer, std::vector<int32_t> eos_token_ids);

  // Queues a request. Refuses (kInvalidArgument, message naming the field) bad sampling
  // parameters, an empty prompt, ids outside the vocabulary, and a prompt plus max_tokens
  // longer than max_model_len.
  Result<RequestId> add_request(std::vector<int32_t> prompt_token_ids,
                                const SamplingParams& params);

  // Runs one step; returns the progress of every request that made some.
  std::vector<RequestOutput> step();

  // Ends every sequence of the request now and frees its blocks; no output follows. False
  // when the id is unknown or already finished.
  bool abort(RequestId id);

  // Requests not finished, or a step still in flight (step() drains it, returning nothing).
  bool has_unfinished() const { return !requests_.empty() || !in_flight_.empty(); }
  int64_t max_model_len() const { return config_.scheduler.max_model_len; }
  int64_t vocab_size() const { return vocab_size_; }
  const ResolvedEngineConfig& config() const { return config_; }
  const Scheduler& scheduler() const { return scheduler_; }
  // Steps submitted while the previous one was still in flight (async scheduling; for tests).
  int64_t num_steps_scheduled_ahead() const { return num_steps_scheduled_ahead_; }
  const ModelRunner& model_runner() const { return runner_; }
  // The backend, for what only tools ask it (s4kv bench: weight_bytes, measure_copy_bandwidth);
  // never to run a step outside step().
  backend::Backend& backend() { return *backend_; }

 private:
  struct RequestState {
    SamplingParams params;
    int64_t num_prompt_tokens = 0;
    std::vector<RequestId> seq_ids;  // the scheduler ids of its n sequences, by index
    // n > 1: sequences 1..n-1 wait here until sequence 0 has computed the prompt, so that
    // they start from its cached full blocks instead of computing the prompt again.
    std::vector<int32_t> held_prompt;
    int num_unfinished = 0;
    size_t output_slot = 0;  // where this step's RequestOutput sits in step()'s result
    uint64_t output_step = 0;
  };
  struct SequenceState {
    RequestId parent = 0;
    int index = 0;
    uint64_t rng_key = 0;
    int64_t max_tokens = 0;
    StopChecker stop;
    tokenizer::IncrementalDetokenizer detok;
  };
  // A submitted step, waiting for its results.
  struct InFlightStep {
    SchedulerOutput out;
    // A row reads the ids generated so far (penalties): the next step is scheduled only once
    // this one's tokens are in.
    bool reads_output_ids = false;
  };

  void schedule_sequence(RequestId seq_id, const std::vector<int32_t>& prompt, int64_t max_tokens);
  void release_held_sequences(RequestState& req);

  Status validate_prompt(std::span<const int32_t> prompt_token_ids) const;
  // Sample rows, submission; false when nothing was scheduled (nothing is in flight then).
  bool launch(SchedulerOutput out);
  bool build_sample_rows(const SchedulerOutput& out);
  // Waits for the oldest step in flight and applies its tokens.
  std::vector<RequestOutput> complete_oldest();
  void process_token(const TokenOutput& t, const SampleOutput& sample,
                     std::vector<RequestOutput>& outputs);
  RequestOutput& output_for(RequestId parent, RequestState& req,
                            std::vector<RequestOutput>& outputs);
  void finish_sequence(RequestId seq_id, std::optional<FinishReason> scheduler_reason,
                       FinishReason reason);

  ResolvedEngineConfig config_;
  std::unique_ptr<backend::Backend> backend_;
  const tokenizer::Tokenizer& tokenizer_;
  std::vector<int32_t> eos_token_ids_;
  int64_t vocab_size_;
  Scheduler scheduler_;
  ModelRunner runner_;
  Sampler sampler_;
  SequenceKeySource keys_;

  std::unordered_map<RequestId, RequestState> requests_;    // by user-facing id
  std::unordered_map<RequestId, SequenceState> sequences_;  // by scheduler id
  RequestId next_request_id_ = 0;
  RequestId next_seq_id_ = 0;
  uint64_t num_steps_ = 0;
  int64_t num_steps_scheduled_ahead_ = 0;

  std::deque<InFlightStep> in_flight_;  // submitted, oldest first (Backend::kMaxInFlight)

  // Per-step scratch, reused.
  std::vector<SampleRow> rows_;
  std::vector<int32_t> sampled_ids_;
};

}  // namespace s4kv::engine
