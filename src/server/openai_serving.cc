// OpenAiServing: the two OpenAI generation routes, from a parsed body to a started run
// (openai_run.h): parse (openai_protocol.h) -> prompt ids -> max_tokens against the context
// -> submit. Every refusal before submission is answered here as an error body.
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
  start_openai_run(engine_link(engine_), engine_.tokenizer(), std::move(exchange),
                   ResponseMeta{make_request_id("chatcmpl-"), unix_seconds(), request->model},
                   options, std::move(prompts));
}

void OpenAiServing::completions(const OrderedJson& body, std::shared_ptr<HttpExchange> exchange) {
  ApiError error;
  auto request = parse_completion_request(body, model_, error);
  if (!request) return respond_error(*exchange, error);
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
  start_openai_run(engine_link(engine_), engine_.tokenizer(), std::move(exchange),
                   ResponseMeta{make_request_id("cmpl-"), unix_seconds(), request->model}, options,
                   std::move(prompts));
}

}  // namespace s4kv::server
