#include "engine/engine_core.h"

#include <optional>
#include <utility>

namespace s4kv::engine {

EngineCore::EngineCore(const ResolvedEngineConfig& config,
                       std::unique_ptr<backend::Backend> backend,
                       const tokenizer::Tokenizer& tokenizer, std::vector<int32_t> eos_token_ids)
    : config_(config),
      backend_(std::move(backend)),
      tokenizer_(tokenizer),
      eos_token_ids_(std::move(eos_token_ids)),
      vocab_size_(backend_->vocab_size()),
      scheduler_(config.scheduler, config.cache),
      runner_(*backend_, config.runner),
      sampler_(vocab_size_, eos_token_ids_),
      keys_(config.seed) {
  const backend::KvCacheConfig& kv = backend_->kv_cache_config();
  S4KV_CHECK(kv.num_blocks == config.cache.num_blocks && kv.block_size == config.cache.block_size,
             "engine: the backend's KV cache does not match the resolved config");
}

Status EngineCore::validate_prompt(std::span<const int32_t> ids) const {
  if (ids.empty()) return invalid_argument("prompt: the prompt is empty");
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size_) {
      return invalid_argument("prompt: token " + std::to_string(i) + " has id " +
                              std::to_string(ids[i]) + ", outside the vocabulary (size " +
                              std::to_string(vocab_size_) + ")");
    }
  }
  return Status::ok();
}

Result<RequestId> EngineCore::add_request(std::vector<int32_t> prompt_token_ids,
                                          const SamplingParams& params) {
  S4KV_RETURN_IF_ERROR(params.validate(vocab_size_, max_model_len()));
  S4KV_RETURN_IF_ERROR(validate_prompt(prompt_token_ids));
  const auto num_prompt = static_cast<int64_t>(prompt_token_ids.size());
  S4KV_ASSIGN_OR_RETURN(const int64_t max_tokens,
                        resolve_max_tokens(params, num_prompt, max_model_len()));
  const RequestId id = next_request_id_++;
  RequestState& req = requests_[id];
  req.params = params;
  req.num_prompt_tokens = num_prompt;
  for (int i = 0; i < static_cast<int>(params.n); ++i) {
    const RequestId seq_id = next_seq_id_++;
    if (i == 0) schedule_sequence(seq_id, prompt_token_ids, max_tokens);
    sequences_.try_emplace(
        seq_id,
        SequenceState{id, i, keys_.key(params.seed, i), max_tokens,
                      StopChecker(req.params, eos_token_ids_, max_tokens),
                      tokenizer::IncrementalDetokenizer(tokenizer_, params.skip_special_tokens)});
    req.seq_ids.push_back(seq_id);
  }
  req.num_unfinished = static_cast<int>(params.n);
  if (params.n > 1) req.held_prompt = std::move(prompt_token_ids);
  return id;
}

void EngineCore::schedule_sequence(RequestId seq_id, const std::vector<int32_t>& prompt,
                                   int64_t max_tokens) {
  // Cannot fail: the prompt is non-empty, within max_model_len, and the id is fresh.
  const Status s = scheduler_.add_request(seq_id, prompt, max_tokens);
  S4KV_CHECK(s.is_ok(), "engine: scheduler refused a checked request: ", s.message());
}

void EngineCore::release_held_sequences(RequestState& req) {
  for (size_t i = 1; i < req.seq_ids.size(); ++i) {
    const auto it = sequences_.find(req.seq_ids[i]);
    if (it != sequences_.end()) {
      schedule_sequence(req.seq_ids[i], req.held_prompt, it->second.max_tokens);
    }
  }
  req.held_prompt.clear();
  req.held_prompt.shrink_to_fit();
}

bool EngineCore::abort(RequestId id) {
  const auto it = requests_.find(id);
  if (it == requests_.end()) return false;
  for (RequestId seq_id : it->second.seq_ids) {
    (void)scheduler_.abort(seq_id);  // false for sequences that already ended
    sequences_.erase(seq_id);
  }
  requests_.erase(it);
  return true;
}

// One row per scheduled request that samples, in scheduled order (the runner's logits order).
// True when a row reads the ids generated so far.
bool EngineCore::build_sample_rows(const SchedulerOutput& out) {
  rows_.clear();
  bool reads_output_ids = false;
  for (const ScheduledRequest& s : out.scheduled) {
    if (!s.samples) continue;
    const Request* r = scheduler_.get_request(s.request_id);
    S4KV_CHECK(r != nullptr, "engine: scheduled request ", s.request_id, " is gone");
    const SequenceState& seq = sequences_.at(s.request_id);
    const SamplingParams& params = requests_.at(seq.parent).params;
    reads_output_ids = reads_output_ids || params.reads_output_ids();
    // The request holds this step's placeholder and, scheduled ahead, the step in flight's.
    rows_.push_back(SampleRow{&params, r->prompt_token_ids(), r->output_token_ids(), seq.rng_key,
                              r->num_output_placeholders() - 1});
  }
  return reads_output_ids;
}

bool EngineCore::launch(SchedulerOutput out) {
  const bool reads_output_ids = build_sample_rows(out);
  if (!runner_.submit(out, rows_, sampler_)) return false;
  in_flight_.push_back(InFlightStep{std::move(out), reads_output_ids});
  return true;
}

std::vector<RequestOutput> EngineCore::step() {
  ++num_steps_;
  if (in_flight_.empty() && !launch(scheduler_.schedule())) return {};
  if (config_.scheduler.async_scheduling && in_flight_.size() == 1 &&
      !in_flight_.front().reads_output_ids) {
    // Step N+1 goes to the device before the host waits for step N; nullopt: it would preempt.
    std::optional<SchedulerOutput> ahead = scheduler_.schedule_ahead();
    if (ahead && launch(std::move(*ahead))) ++num_steps_scheduled_ahead_;
  }
  return complete_oldest();
}

std::vector<RequestOutput> EngineCore::complete_oldest() {
  const InFlightStep step = std::move(in_flight_.front());
  in_flight_.pop_front();
  const std::span<const SampleOutput> samples = runner_.wait();
  const std::vector<ScheduledRequest>& scheduled = step.out.scheduled;
  sampled_ids_.assign(scheduled.size(), -1);
  size_t num_rows = 0;
  for (size_t i = 0; i < scheduled.size(); ++i) {
    if (!scheduled[i].samples) continue;
    S4KV_CHECK(num_rows < samples.size(), "engine: ", samples.size(), " samples for more rows");
    sampled_ids_[i] = samples[num_rows++].token_id;
  }
  std::vector<RequestOutput> outputs;
  // Results come in scheduled order, one per sampling entry at most: walk the sampling entries
  // alongside, counting their logits rows.
  size_t i = 0, row = 0;
  for (const TokenOutput& t : scheduler_.update_from_output(step.out, sampled_ids_)) {
    for (;; ++i) {
      if (!scheduled[i].samples) continue;
      if (scheduled[i].request_id == t.request_id) break;
      ++row;
    }
    process_token(t, samples[row], outputs);
  }
  return outputs;
}

RequestOutput& EngineCore::output_for(RequestId parent, RequestState& req,
                                      std::vector<RequestOutput>& outputs) {
  if (req.output_step != num_steps_) {
    req.output_step = num_steps_;
    req.output_slot = outputs.size();
    outputs.push_back(RequestOutput{parent, req.num_prompt_tokens, {}, false});
  }
  return outputs[req.output_slot];
}

void EngineCore::process_token(const TokenOutput& t, const SampleOutput& sample,
                               std::vector<RequestOutput>& outputs) {
  SequenceState& seq = sequences_.at(t.request_id);
  const RequestId parent = seq.parent;
  RequestState& req = requests_.at(parent);
  // Sequence 0's first token means the prompt's full blocks are computed and cached.
  if (seq.index == 0 && !req.held_prompt.empty()) release_held_sequences(req);
  std::string piece = seq.detok.add(t.token_id);
  // The last token of a length-capped sequence: flush a trailing partial character as
  // decode() would, so the output text equals the decode of the output ids.
  if (seq.stop.num_output_tokens() + 1 >= seq.max_tokens) piece += seq.detok.finish();
  const StopUpdate u = seq.stop.append(t.token_id, piece);

  RequestOutput& ro = output_for(parent, req, outputs);
  CompletionOutput& co = ro.outputs.emplace_back();
  co.index = seq.index;
  co.text = u.text;
  co.token_ids.push_back(t.token_id);
  if (req.params.logprobs) co.logprobs.push_back(sample);
  // The scheduler ends a sequence by itself only at max_model_len, where max_tokens (resolved
  // against it) ends it too; the stop checker's reason wins when both fire.
  if (!u.finished() && !t.finish_reason) return;
  co.finish_reason = u.finished() ? *u.finish_reason : *t.finish_reason;
  co.stop_str = u.stop_str;
  co.stop_token_id = u.stop_token_id;
  finish_sequence(t.request_id, t.finish_reason, *co.finish_reason);
  if (--req.num_unfinished == 0) {
    ro.finished = true;
    requests_.erase(parent);
  }
}

void EngineCore::finish_sequence(RequestId seq_id, std::optional<FinishReason> scheduler_reason,
                                 FinishReason reason) {
  if (!scheduler_reason) {
    const std::unique_ptr<Request> done = scheduler_.finish(seq_id, reason);
    S4KV_CHECK(done != nullptr, "engine: finishing unknown sequence ", seq_id);
  }
  sequences_.erase(seq_id);
}

}  // namespace s4kv::engine
