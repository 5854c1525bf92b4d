// OpenAiRun: one OpenAI request in flight (see openai_run.h for threads and lifetime).
#include "server/openai_run.h"

#include <atomic>
#include <string>
#include <utility>

#include "common/log.h"

namespace s4kv::server {
namespace {

// What one choice has produced so far.
struct ChoiceState {
  std::string text;                // non-streamed: the whole text
  OrderedJson logprobs = nullptr;  // non-streamed: accumulated logprobs
  std::optional<ChoiceFinish> finish;
  int64_t text_offset = 0;  // completions logprobs: characters so far
  bool echoed = false;
};

class OpenAiRun : public std::enable_shared_from_this<OpenAiRun> {
 public:
  OpenAiRun(EngineLink engine, const tokenizer::Tokenizer& tokenizer,
            std::shared_ptr<HttpExchange> exchange, ResponseMeta meta, RunOptions options)
      : engine_(std::move(engine)),
        tokenizer_(tokenizer),
        exchange_(std::move(exchange)),
        meta_(std::move(meta)),
        options_(options) {}

  void start(std::vector<PromptRun> prompts);

 private:
  void notify();  // engine thread
  void drain();
  void handle(size_t prompt, EngineEvent& event);
  void on_output(size_t prompt, const engine::CompletionOutput& out);
  void stream_output(ChoiceState& choice, int64_t index, std::string text,
                     const engine::CompletionOutput& out);
  OrderedJson logprobs_of(ChoiceState& choice, const engine::CompletionOutput& out) const;
  void begin_stream();
  void finish();
  void fail(const ApiError& error);
  void on_disconnect();
  void abort_unfinished();
  void end();  // lets go of the channels; nothing more is done
  // null, the usage so far (continuous_usage_stats), or no key (nullptr).
  const OrderedJson* chunk_usage();

  EngineLink engine_;
  const tokenizer::Tokenizer& tokenizer_;
  std::shared_ptr<HttpExchange> exchange_;
  ResponseMeta meta_;
  RunOptions options_;
  std::atomic<bool> drain_posted_{false};

  // Strand only.
  std::vector<std::string> prompt_texts_;                  // for echo
  std::vector<std::shared_ptr<RequestChannel>> channels_;  // by prompt; cleared at the end
  std::vector<uint64_t> tickets_;                          // by prompt
  std::vector<bool> finished_;                             // by prompt
  std::vector<ChoiceState> choices_;                       // by choice index
  Usage usage_;
  std::string pending_;  // stream chunks of this drain, written together
  OrderedJson usage_value_;
  bool begun_ = false;
  bool done_ = false;
};

void OpenAiRun::start(std::vector<PromptRun> prompts) {
  choices_.resize(prompts.size() * static_cast<size_t>(options_.n));
  finished_.assign(prompts.size(), false);
  std::vector<EngineRequest> requests;
  requests.reserve(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    PromptRun& p = prompts[i];
    usage_.prompt_tokens += static_cast<int64_t>(p.prompt.token_ids.size());
    prompt_texts_.push_back(std::move(p.prompt.text));
    auto channel =
        std::make_shared<RequestChannel>([self = shared_from_this()] { self->notify(); });
    EngineRequest request;
    request.id = prompts.size() == 1 ? meta_.id : meta_.id + "-" + std::to_string(i);
    request.prompt_token_ids = std::move(p.prompt.token_ids);
    request.params = std::move(p.params);
    request.channel = channel;
    requests.push_back(std::move(request));
    channels_.push_back(std::move(channel));
  }
  Result<std::vector<uint64_t>> tickets = engine_.submit(std::move(requests));
  if (!tickets.is_ok()) {
    end();
    // Invalid: more sequences than may ever wait (OpenAiServing checks it before tokenizing).
    const bool invalid = tickets.status().code() == StatusCode::kInvalidArgument;
    respond_error(
        *exchange_,
        from_status(tickets.status(), invalid ? std::optional<std::string>("n") : std::nullopt));
    return;
  }
  tickets_ = std::move(tickets).value();
  exchange_->on_disconnect([weak = weak_from_this()] {
    if (auto self = weak.lock()) self->on_disconnect();
  });
}

void OpenAiRun::notify() {
  if (drain_posted_.exchange(true)) return;
  exchange_->post([self = shared_from_this()] { self->drain(); });
}

void OpenAiRun::drain() {
  drain_posted_.store(false);
  for (size_t i = 0; i < channels_.size() && !done_; ++i) {
    std::vector<EngineEvent> events = channels_[i]->take();
    for (EngineEvent& event : events) {
      if (done_) break;
      handle(i, event);
    }
  }
  if (done_) return;
  bool all_finished = true;
  for (const bool f : finished_) all_finished = all_finished && f;
  if (all_finished) {
    finish();
  } else if (!pending_.empty()) {
    exchange_->write(std::move(pending_));
    pending_.clear();
  }
}

void OpenAiRun::handle(size_t prompt, EngineEvent& event) {
  if (event.error) {
    finished_[prompt] = true;  // nothing follows an error: no abort needed
    fail(from_status(*event.error));
    return;
  }
  if (!event.output) return;
  if (options_.stream && !begun_) begin_stream();
  for (const engine::CompletionOutput& out : event.output->outputs) on_output(prompt, out);
  if (event.output->finished) finished_[prompt] = true;
}

void OpenAiRun::on_output(size_t prompt, const engine::CompletionOutput& out) {
  const int64_t index = static_cast<int64_t>(prompt) * options_.n + out.index;
  S4KV_CHECK(out.index >= 0 && out.index < options_.n, "sequence index out of range");
  ChoiceState& choice = choices_[static_cast<size_t>(index)];
  usage_.completion_tokens += static_cast<int64_t>(out.token_ids.size());
  std::string text = out.text;
  if (options_.echo && !choice.echoed) {
    text = prompt_texts_[prompt] + text;
    choice.echoed = true;
  }
  if (out.finish_reason)
    choice.finish = ChoiceFinish{*out.finish_reason, out.stop_str, out.stop_token_id};
  if (options_.stream) {
    stream_output(choice, index, std::move(text), out);
    return;
  }
  choice.text += text;
  if (options_.top_logprobs) {
    OrderedJson delta = logprobs_of(choice, out);
    if (choice.logprobs.is_null()) {
      choice.logprobs = std::move(delta);
    } else {
      for (auto& [key, values] : delta.items()) {
        for (auto& v : values) choice.logprobs[key].push_back(std::move(v));
      }
    }
  }
}

// The logprobs of this output's tokens, in the API's shape; advances text_offset.
OrderedJson OpenAiRun::logprobs_of(ChoiceState& choice, const engine::CompletionOutput& out) const {
  const int64_t top_n = options_.top_logprobs.value_or(0);
  if (options_.chat) {
    OrderedJson j;
    j["content"] = OrderedJson::array();
    append_chat_logprobs(tokenizer_, out.logprobs, top_n, j["content"]);
    return j;
  }
  OrderedJson j = empty_completion_logprobs();
  append_completion_logprobs(tokenizer_, out.logprobs, top_n, choice.text_offset, j);
  return j;
}

void OpenAiRun::stream_output(ChoiceState& choice, int64_t index, std::string text,
                              const engine::CompletionOutput& out) {
  const bool with_logprobs = options_.top_logprobs.has_value();
  // Nothing to say: no text released (a character still incomplete), no logprobs, no end.
  if (text.empty() && !out.finish_reason && (!with_logprobs || out.token_ids.empty())) return;
  OrderedJson logprobs = with_logprobs ? logprobs_of(choice, out) : OrderedJson(nullptr);
  const ChoiceFinish* finish = out.finish_reason ? &*choice.finish : nullptr;
  if (options_.chat) {
    OrderedJson delta;
    delta["content"] = std::move(text);
    pending_ += sse_event(
        chat_chunk(meta_, index, std::move(delta), std::move(logprobs), finish, chunk_usage()));
  } else {
    pending_ += sse_event(completion_chunk(meta_, index, std::move(text), std::move(logprobs),
                                           finish, chunk_usage()));
  }
}

const OrderedJson* OpenAiRun::chunk_usage() {
  if (!options_.stream_options.include_usage) return nullptr;
  usage_value_ =
      options_.stream_options.continuous_usage_stats ? usage_json(usage_) : OrderedJson(nullptr);
  return &usage_value_;
}

void OpenAiRun::begin_stream() {
  begun_ = true;
  exchange_->begin_stream(200, "text/event-stream");
  if (!options_.chat) return;
  for (size_t i = 0; i < choices_.size(); ++i) {
    OrderedJson delta;
    delta["role"] = "assistant";
    delta["content"] = "";
    pending_ += sse_event(chat_chunk(meta_, static_cast<int64_t>(i), std::move(delta), nullptr,
                                     nullptr, chunk_usage()));
  }
}

void OpenAiRun::finish() {
  if (options_.stream) {
    if (!begun_) begin_stream();
    if (options_.stream_options.include_usage) {
      pending_ += sse_event(
          usage_chunk(meta_, options_.chat ? "chat.completion.chunk" : "text_completion", usage_));
    }
    pending_ += kSseDone;
    exchange_->write(std::move(pending_));
    pending_.clear();
    exchange_->end_stream();
    end();
    return;
  }
  std::vector<ChoiceResult> results(choices_.size());
  for (size_t i = 0; i < choices_.size(); ++i) {
    ChoiceState& c = choices_[i];
    results[i].index = static_cast<int64_t>(i);
    results[i].text = std::move(c.text);
    results[i].logprobs = std::move(c.logprobs);
    // Every sequence ends with a finish_reason; kAbort stands in should one not.
    results[i].finish = c.finish.value_or(ChoiceFinish{engine::FinishReason::kAbort, {}, {}});
  }
  const OrderedJson body = options_.chat ? chat_completion_response(meta_, results, usage_)
                                         : completion_response(meta_, results, usage_);
  HttpResponse response;
  response.body = dump_json(body);
  exchange_->respond(std::move(response));
  end();
}

void OpenAiRun::fail(const ApiError& error) {
  abort_unfinished();
  if (error.status >= 500) log_warn("server", meta_.id + ": " + error.message);
  if (begun_) {
    pending_ += sse_error(error);
    pending_ += kSseDone;
    exchange_->write(std::move(pending_));
    pending_.clear();
    exchange_->end_stream();
  } else {
    respond_error(*exchange_, error);
  }
  end();
}

void OpenAiRun::on_disconnect() {
  if (done_) return;
  abort_unfinished();
  end();
}

void OpenAiRun::abort_unfinished() {
  for (size_t i = 0; i < tickets_.size(); ++i) {
    if (!finished_[i]) engine_.abort(tickets_[i]);
  }
}

void OpenAiRun::end() {
  done_ = true;
  channels_.clear();
}

}  // namespace

EngineLink engine_link(AsyncEngine& engine) {
  return EngineLink{
      [&engine](std::vector<EngineRequest> r) { return engine.submit_all(std::move(r)); },
      [&engine](uint64_t ticket) { engine.abort(ticket); }};
}

void start_openai_run(EngineLink engine, const tokenizer::Tokenizer& tokenizer,
                      std::shared_ptr<HttpExchange> exchange, ResponseMeta meta, RunOptions options,
                      std::vector<PromptRun> prompts) {
  auto run = std::make_shared<OpenAiRun>(std::move(engine), tokenizer, std::move(exchange),
                                         std::move(meta), options);
  run->start(std::move(prompts));
}

void respond_error(HttpExchange& exchange, const ApiError& error) {
  HttpResponse response;
  response.status = error.status;
  response.headers = error.headers;
  response.body = error_body(error);
  response.close = error.close;
  exchange.respond(std::move(response));
}

}  // namespace s4kv::server
