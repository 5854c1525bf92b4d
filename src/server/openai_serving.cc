// OpenAiServing: the two OpenAI generation routes, from a parsed body to a started run
// (openai_run.h): parse (openai_protocol.h) -> prompts x n against the queue -> prompt ids ->
// max_tokens against the context -> submit, on the exchange's strand. Every refusal before
// submission is answered here as an error body.
#include "server/openai_serving.h"

#include <chrono>
#include <utility>

namespace s4kv::server {
namespace {

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// params with max_tokens resolved for a prompt, checked again as a whole (min_tokens may
// now exceed a max_tokens cut short by the context).
std::optional<engine::SamplingParams> params_for_prompt(const engine::SamplingParams& params,
                                                        std::optional<int64_t> default_max_tokens,
                                                        int64_t num_prompt_tokens,
                                                        const ModelContext& model,
                                                        const std::string& param, ApiError& error) {
  auto max_tokens = resolve_request_max_tokens(params, default_max_tokens, num_prompt_tokens, model,
                                               param, error);
  if (!max_tokens) return std::nullopt;
  engine::SamplingParams p = params;
  p.max_tokens = *max_tokens;
  const Status s = p.validate(model.vocab_size, model.max_model_len);
  if (!s.is_ok()) {
    error = bad_request(s.message(), std::string(engine::error_param(s.message())));
    return std::nullopt;
  }
  return p;
}

// More sequences than may ever wait: refused before any tokenizing (a 400, not a 503: it
// would never fit).
std::optional<ApiError> check_num_sequences(size_t num_prompts, int64_t n, int64_t limit) {
  const int64_t num_seqs = static_cast<int64_t>(num_prompts) * n;
  if (num_seqs <= limit) return std::nullopt;
  return bad_request("the request makes " + std::to_string(num_seqs) + " sequences (" +
                         std::to_string(num_prompts) + " prompts x n " + std::to_string(n) +
                         ") and at most " + std::to_string(limit) +
                         " may wait (--max-queued-requests); send fewer prompts or a smaller n.",
                     n > 1 ? "n" : "prompt");
}

// The run starts on the exchange's strand, where its events will be handled (openai_run.h).
void start_on_strand(EngineLink engine, const tokenizer::Tokenizer& tokenizer,
                     std::shared_ptr<HttpExchange> exchange, ResponseMeta meta, RunOptions options,
                     std::vector<PromptRun> prompts) {
  auto state = std::make_shared<std::vector<PromptRun>>(std::move(prompts));
  HttpExchange& ex = *exchange;
  ex.post([engine = std::move(engine), &tokenizer, exchange = std::move(exchange),
           meta = std::move(meta), options, state]() mutable {
    start_openai_run(std::move(engine), tokenizer, std::move(exchange), std::move(meta), options,
                     std::move(*state));
  });
}

}  // namespace

OpenAiServing::OpenAiServing(AsyncEngine& engine, const tokenizer::ChatTemplate* chat_template,
                             std::vector<std::string> served_model_names)
    : engine_(engine), chat_template_(chat_template) {
  S4KV_CHECK(!served_model_names.empty(), "OpenAiServing: no served model name");
  model_.served_model_names = std::move(served_model_names);
  model_.vocab_size = engine.vocab_size();
  model_.max_model_len = engine.max_model_len();
  model_.generation_config = engine.generation_config();
}

void OpenAiServing::chat_completions(const OrderedJson& body,
                                     std::shared_ptr<HttpExchange> exchange) {
  ApiError error;
  auto request = parse_chat_request(body, model_, error);
  if (!request) return respond_error(*exchange, error);
  if (chat_template_ == nullptr) {
    return respond_error(*exchange,
                         bad_request("This model has no chat template: start the server with "
                                     "--chat-template, or use /v1/completions."));
  }
  if (auto e = check_num_sequences(1, request->params.n, engine_.max_queued_sequences())) {
    return respond_error(*exchange, *e);
  }
  auto ids = chat_prompt_ids(*request, *chat_template_, engine_.tokenizer(), error);
  if (!ids) return respond_error(*exchange, error);
  auto params = params_for_prompt(request->params, std::nullopt, static_cast<int64_t>(ids->size()),
                                  model_, "messages", error);
  if (!params) return respond_error(*exchange, error);

  RunOptions options;
  options.chat = true;
  options.stream = request->stream;
  options.stream_options = request->stream_options;
  options.top_logprobs = request->top_logprobs;
  options.n = request->params.n;
  std::vector<PromptRun> prompts(1);
  prompts[0].prompt.token_ids = std::move(*ids);
  prompts[0].params = std::move(*params);
  start_on_strand(engine_link(engine_), engine_.tokenizer(), std::move(exchange),
                  ResponseMeta{make_request_id("chatcmpl-"), unix_seconds(), request->model},
                  options, std::move(prompts));
}

void OpenAiServing::completions(const OrderedJson& body, std::shared_ptr<HttpExchange> exchange) {
  ApiError error;
  auto request = parse_completion_request(body, model_, error);
  if (!request) return respond_error(*exchange, error);
  if (auto e = check_num_sequences(request->prompts.size(), request->params.n,
                                   engine_.max_queued_sequences())) {
    return respond_error(*exchange, *e);
  }
  auto tokenized = completion_prompts(*request, engine_.tokenizer(), error);
  if (!tokenized) return respond_error(*exchange, error);
  std::vector<PromptRun> prompts;
  prompts.reserve(tokenized->size());
  for (TokenizedPrompt& t : *tokenized) {
    auto params =
        params_for_prompt(request->params, kDefaultCompletionMaxTokens,
                          static_cast<int64_t>(t.token_ids.size()), model_, "prompt", error);
    if (!params) return respond_error(*exchange, error);
    prompts.push_back(PromptRun{std::move(t), std::move(*params)});
  }

  RunOptions options;
  options.chat = false;
  options.stream = request->stream;
  options.stream_options = request->stream_options;
  options.top_logprobs = request->params.logprobs;
  options.echo = request->echo;
  options.n = request->params.n;
  start_on_strand(engine_link(engine_), engine_.tokenizer(), std::move(exchange),
                  ResponseMeta{make_request_id("cmpl-"), unix_seconds(), request->model}, options,
                  std::move(prompts));
}

}  // namespace s4kv::server
