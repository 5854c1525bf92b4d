// Request parsing of /v1/chat/completions and /v1/completions (openai_protocol.h): every
// field's type and default, generation-config defaults, refusals with their param, message
// normalization, prompt forms, chat rendering and the context-length check. Uses the bundled
// tiny model's tokenizer and chat template (tests run from the repository root).
#include "server/openai_protocol.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace s4kv::server {
namespace {

constexpr const char* kModelDir = "models/s4kv-tiny";

OrderedJson J(const std::string& text) { return OrderedJson::parse(text); }

ModelContext tiny_context() {
  ModelContext m;
  m.served_model_names = {"s4kv-tiny", "alias"};
  m.vocab_size = 8192;
  m.max_model_len = 256;
  return m;
}

// A chat body with one user message plus `extra` fields.
OrderedJson chat_body(const std::string& extra_fields = "") {
  std::string text = R"({"messages": [{"role": "user", "content": "Hi"}]})";
  if (!extra_fields.empty()) text.insert(text.size() - 1, ", " + extra_fields);
  return J(text);
}

std::optional<ChatRequest> parse_chat(const std::string& extra, ApiError& error,
                                      const ModelContext& m = tiny_context()) {
  return parse_chat_request(chat_body(extra), m, error);
}

// Expects the chat fields to be refused with this param.
void expect_chat_refused(const std::string& extra, const std::string& param, int status = 400) {
  ApiError error;
  EXPECT_FALSE(parse_chat(extra, error).has_value()) << extra;
  EXPECT_EQ(error.status, status) << extra;
  ASSERT_TRUE(error.param.has_value()) << extra << ": " << error.message;
  EXPECT_EQ(*error.param, param) << extra << ": " << error.message;
}

std::optional<CompletionRequest> parse_completion(const std::string& body, ApiError& error) {
  return parse_completion_request(J(body), tiny_context(), error);
}

void expect_completion_refused(const std::string& body, const std::string& param) {
  ApiError error;
  EXPECT_FALSE(parse_completion(body, error).has_value()) << body;
  EXPECT_EQ(error.status, 400) << body;
  ASSERT_TRUE(error.param.has_value()) << body << ": " << error.message;
  EXPECT_EQ(*error.param, param) << body << ": " << error.message;
}

TEST(ChatRequestTest, DefaultsWhenOnlyMessagesAreGiven) {
  ApiError error;
  auto r = parse_chat("", error);
  ASSERT_TRUE(r.has_value()) << error.message;
  EXPECT_EQ(r->model, "s4kv-tiny");
  EXPECT_EQ(r->params.n, 1);
  EXPECT_DOUBLE_EQ(r->params.temperature, 1.0);
  EXPECT_DOUBLE_EQ(r->params.top_p, 1.0);
  EXPECT_EQ(r->params.top_k, 0);
  EXPECT_FALSE(r->params.max_tokens.has_value());
  EXPECT_FALSE(r->params.logprobs.has_value());
  EXPECT_FALSE(r->params.seed.has_value());
  EXPECT_TRUE(r->params.skip_special_tokens);
  EXPECT_FALSE(r->stream);
  EXPECT_FALSE(r->stream_options.include_usage);
  EXPECT_TRUE(r->add_generation_prompt);
  EXPECT_FALSE(r->continue_final_message);
  EXPECT_FALSE(r->add_special_tokens);
  EXPECT_FALSE(r->top_logprobs.has_value());
  EXPECT_TRUE(r->tools.is_null());
  EXPECT_EQ(r->messages, J(R"([{"role": "user", "content": "Hi"}])"));
}

TEST(ChatRequestTest, EverySamplingFieldIsRead) {
  ApiError error;
  auto r = parse_chat(
      R"("model": "alias", "temperature": 0.5, "top_p": 0.9, "top_k": -1, "min_p": 0.05,
         "n": 3, "stop": ["a", "bc"], "stop_token_ids": [1, 2], "seed": 7,
         "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1,
         "logit_bias": {"5": 10, "17": -100.0}, "ignore_eos": true, "min_tokens": 2,
         "include_stop_str_in_output": true, "skip_special_tokens": false, "max_tokens": 40,
         "user": "u-1")",
      error);
  ASSERT_TRUE(r.has_value()) << error.message;
  const engine::SamplingParams& p = r->params;
  EXPECT_EQ(r->model, "s4kv-tiny");  // the first served name, whichever was asked for
  EXPECT_DOUBLE_EQ(p.temperature, 0.5);
  EXPECT_DOUBLE_EQ(p.top_p, 0.9);
  EXPECT_EQ(p.top_k, -1);
  EXPECT_DOUBLE_EQ(p.min_p, 0.05);
  EXPECT_EQ(p.n, 3);
  EXPECT_EQ(p.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_EQ(p.stop_token_ids, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(p.seed, 7);
  EXPECT_DOUBLE_EQ(p.presence_penalty, 0.5);
  EXPECT_DOUBLE_EQ(p.frequency_penalty, -0.5);
  EXPECT_DOUBLE_EQ(p.repetition_penalty, 1.1);
  EXPECT_EQ(p.logit_bias, (std::map<int64_t, double>{{5, 10.0}, {17, -100.0}}));
  EXPECT_TRUE(p.ignore_eos);
  EXPECT_EQ(p.min_tokens, 2);
  EXPECT_TRUE(p.include_stop_str_in_output);
  EXPECT_FALSE(p.skip_special_tokens);
  EXPECT_EQ(p.max_tokens, 40);
}

TEST(ChatRequestTest, SingleStopStringNullFieldsSeedMinusOneAndIntegralFloats) {
  ApiError error;
  auto r = parse_chat(R"("stop": "END", "seed": -1, "temperature": null, "n": 2.0,
                         "max_tokens": null, "some_future_field": {"x": 1})",
                      error);
  ASSERT_TRUE(r.has_value()) << error.message;
  EXPECT_EQ(r->params.stop, std::vector<std::string>{"END"});
  EXPECT_FALSE(r->params.seed.has_value());
  EXPECT_DOUBLE_EQ(r->params.temperature, 1.0);
  EXPECT_EQ(r->params.n, 2);
  EXPECT_FALSE(r->params.max_tokens.has_value());
}

TEST(ChatRequestTest, GenerationConfigDefaultsApplyOnlyToUnsetFields) {
  ModelContext m = tiny_context();
  m.generation_config.temperature = 0.6;
  m.generation_config.top_p = 0.8;
  m.generation_config.top_k = 20;
  m.generation_config.min_p = 0.1;
  m.generation_config.repetition_penalty = 1.05;
  ApiError error;
  auto defaults = parse_chat("", error, m);
  ASSERT_TRUE(defaults.has_value()) << error.message;
  EXPECT_DOUBLE_EQ(defaults->params.temperature, 0.6);
  EXPECT_DOUBLE_EQ(defaults->params.top_p, 0.8);
  EXPECT_EQ(defaults->params.top_k, 20);
  EXPECT_DOUBLE_EQ(defaults->params.min_p, 0.1);
  EXPECT_DOUBLE_EQ(defaults->params.repetition_penalty, 1.05);
  auto set = parse_chat(R"("temperature": 0, "top_k": 0, "top_p": 1)", error, m);
  ASSERT_TRUE(set.has_value()) << error.message;
  EXPECT_DOUBLE_EQ(set->params.temperature, 0.0);
  EXPECT_EQ(set->params.top_k, 0);
  EXPECT_DOUBLE_EQ(set->params.top_p, 1.0);
  EXPECT_DOUBLE_EQ(set->params.min_p, 0.1);
}

TEST(ChatRequestTest, WrongTypesNameTheFieldAndBothTypes) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"temperature", R"("hot")"},
      {"top_p", "true"},
      {"top_k", "1.5"},
      {"n", R"("2")"},
      {"min_p", "[]"},
      {"seed", "{}"},
      {"max_tokens", "1e30"},
      {"stop", "5"},
      {"stop", "[1]"},
      {"stop_token_ids", "3"},
      {"stop_token_ids", R"(["a"])"},
      {"logit_bias", "[1]"},
      {"logit_bias", R"({"x": 1})"},
      {"logit_bias", R"({"3": "a"})"},
      {"ignore_eos", "1"},
      {"stream", R"("yes")"},
      {"logprobs", "1"},
      {"top_logprobs", "true"},
      {"user", "5"},
      {"presence_penalty", R"("0")"},
      {"max_completion_tokens", R"("9")"},
      {"min_tokens", "0.5"},
      {"chat_template_kwargs", "[]"},
      {"tools", "{}"},
      {"model", "3"},
      {"add_generation_prompt", "0"}};
  for (const auto& [field, value] : cases) {
    expect_chat_refused("\"" + field + "\": " + value, field);
  }
  ApiError error;
  ASSERT_FALSE(parse_chat(R"("temperature": "hot")", error).has_value());
  EXPECT_EQ(error.message, "temperature: expected number, got string.");
  EXPECT_EQ(error.type, "BadRequestError");
}

TEST(ChatRequestTest, OutOfRangeValuesAreRefusedThroughValidate) {
  expect_chat_refused(R"("temperature": -1)", "temperature");
  expect_chat_refused(R"("top_p": 0)", "top_p");
  expect_chat_refused(R"("top_k": -2)", "top_k");
  expect_chat_refused(R"("n": 0)", "n");
  expect_chat_refused(R"("n": 2, "temperature": 0)", "n");
  expect_chat_refused(R"("presence_penalty": 3)", "presence_penalty");
  expect_chat_refused(R"("max_tokens": 0)", "max_tokens");
  expect_chat_refused(R"("logit_bias": {"8192": 1})", "logit_bias");
  expect_chat_refused(R"("stop_token_ids": [-1])", "stop_token_ids");
  expect_chat_refused(R"("stop": [""])", "stop");
  expect_chat_refused(R"("min_tokens": 50, "max_tokens": 10)", "min_tokens");
  // A max_tokens beyond the context is left to the length check, which knows the prompt.
  ApiError error;
  EXPECT_TRUE(parse_chat(R"("max_tokens": 100000)", error).has_value()) << error.message;
}

TEST(ChatRequestTest, MaxCompletionTokensWinsOverMaxTokens) {
  ApiError error;
  auto r = parse_chat(R"("max_tokens": 10, "max_completion_tokens": 20)", error);
  ASSERT_TRUE(r.has_value()) << error.message;
  EXPECT_EQ(r->params.max_tokens, 20);
}

TEST(ChatRequestTest, LogprobsAndTopLogprobs) {
  ApiError error;
  auto off = parse_chat(R"("logprobs": false, "top_logprobs": 0)", error);
  ASSERT_TRUE(off.has_value()) << error.message;
  EXPECT_FALSE(off->top_logprobs.has_value());
  EXPECT_FALSE(off->params.logprobs.has_value());
  auto on = parse_chat(R"("logprobs": true)", error);
  ASSERT_TRUE(on.has_value()) << error.message;
  EXPECT_EQ(on->top_logprobs, 0);
  EXPECT_EQ(on->params.logprobs, 0);
  auto top = parse_chat(R"("logprobs": true, "top_logprobs": 20)", error);
  ASSERT_TRUE(top.has_value()) << error.message;
  EXPECT_EQ(top->top_logprobs, 20);
  EXPECT_EQ(top->params.logprobs, 20);
  expect_chat_refused(R"("top_logprobs": 2)", "top_logprobs");
  expect_chat_refused(R"("logprobs": true, "top_logprobs": 21)", "top_logprobs");
  expect_chat_refused(R"("logprobs": true, "top_logprobs": -1)", "top_logprobs");
}

TEST(ChatRequestTest, StreamOptionsNeedStream) {
  expect_chat_refused(R"("stream_options": {"include_usage": true})", "stream_options");
  expect_chat_refused(R"("stream": true, "stream_options": {"include_usage": 1})",
                      "stream_options");
  ApiError error;
  auto r = parse_chat(
      R"("stream": true, "stream_options": {"include_usage": true,
                                            "continuous_usage_stats": true})",
      error);
  ASSERT_TRUE(r.has_value()) << error.message;
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->stream_options.include_usage);
  EXPECT_TRUE(r->stream_options.continuous_usage_stats);
}

TEST(ChatRequestTest, UnknownModelIsNotFound) {
  ApiError error;
  ASSERT_FALSE(parse_chat(R"("model": "gpt-4")", error).has_value());
  EXPECT_EQ(error.status, 404);
  EXPECT_EQ(error.type, "NotFoundError");
  EXPECT_EQ(error.message, "The model `gpt-4` does not exist.");
  EXPECT_EQ(error.param, "model");
}

TEST(ChatRequestTest, KnownButUnimplementedFieldsAreRefusedByName) {
  expect_chat_refused(R"("response_format": {"type": "json_object"})", "response_format");
  expect_chat_refused(R"("response_format": "text")", "response_format");
  expect_chat_refused(R"("guided_json": {"type": "object"})", "guided_json");
  expect_chat_refused(R"("guided_regex": "a+")", "guided_regex");
  expect_chat_refused(R"("guided_choice": ["a"])", "guided_choice");
  expect_chat_refused(R"("guided_grammar": "x")", "guided_grammar");
  expect_chat_refused(R"("prompt_logprobs": 1)", "prompt_logprobs");
  expect_chat_refused(R"("best_of": 2)", "best_of");
  expect_chat_refused(R"("functions": [{"name": "f"}])", "functions");
  expect_chat_refused(R"("function_call": "auto")", "function_call");
  expect_chat_refused(R"("chat_template": "{{ 1 }}")", "chat_template");
  const std::string tools = R"("tools": [{"type": "function", "function": {"name": "f"}}], )";
  expect_chat_refused(tools + R"("tool_choice": "required")", "tool_choice");
  expect_chat_refused(tools + R"("tool_choice": {"type": "function", "function": {"name": "f"}})",
                      "tool_choice");
  expect_chat_refused(R"("tool_choice": "auto")", "tool_choice");  // no tools
  expect_chat_refused(R"("allowed_token_ids": [1, 2])", "allowed_token_ids");
  expect_chat_refused(R"("bad_words": ["x"])", "bad_words");
  expect_chat_refused(R"("truncate_prompt_tokens": 10)", "truncate_prompt_tokens");
  expect_chat_refused(R"("prediction": {"type": "content", "content": "x"})", "prediction");
  expect_chat_refused(R"("audio": {"voice": "alloy"})", "audio");
  expect_chat_refused(R"("use_beam_search": true)", "use_beam_search");
  expect_chat_refused(R"("return_tokens_as_token_ids": true)", "return_tokens_as_token_ids");
  expect_chat_refused(R"("spaces_between_special_tokens": false)", "spaces_between_special_tokens");
  expect_chat_refused(R"("priority": 1)", "priority");
  expect_chat_refused(R"("priority": "high")", "priority");
  expect_chat_refused(R"("modalities": ["text", "audio"])", "modalities");
  ApiError error;
  EXPECT_TRUE(parse_chat(R"("response_format": {"type": "text"}, "best_of": 1, "suffix": "x",
                            "tool_choice": "none", "frequency": 3, "use_beam_search": false,
                            "return_tokens_as_token_ids": false, "priority": 0,
                            "spaces_between_special_tokens": true, "modalities": ["text"],
                            "allowed_token_ids": null, "parallel_tool_calls": true)",
                         error)
                  .has_value())
      << error.message;
}

TEST(ChatRequestTest, ToolsAndTemplateOptions) {
  ApiError error;
  auto r = parse_chat(
      R"("tools": [{"type": "function", "function": {"name": "get_weather",
          "description": "d", "parameters": {"type": "object", "properties": {}}}}],
         "tool_choice": "auto", "chat_template_kwargs": {"enable_thinking": false},
         "add_special_tokens": true)",
      error);
  ASSERT_TRUE(r.has_value()) << error.message;
  ASSERT_TRUE(r->tools.is_array());
  EXPECT_EQ(r->tools[0]["function"]["name"], "get_weather");
  EXPECT_EQ(r->chat_template_kwargs, J(R"({"enable_thinking": false})"));
  EXPECT_TRUE(r->add_special_tokens);
  expect_chat_refused(R"("tools": [{"type": "function"}])", "tools");
  expect_chat_refused(R"("tools": [{"type": "retrieval", "function": {"name": "f"}}])", "tools");
  expect_chat_refused(R"("tools": [{"function": {"name": 3}}])", "tools");
  expect_chat_refused(R"("tools": [{"type": 1, "function": {"name": "f"}}])", "tools");
  expect_chat_refused(R"("tools": [1])", "tools");

  auto cont = parse_chat(R"("continue_final_message": true)", error);
  ASSERT_TRUE(cont.has_value()) << error.message;
  EXPECT_FALSE(cont->add_generation_prompt);
  expect_chat_refused(R"("continue_final_message": true, "add_generation_prompt": true)",
                      "continue_final_message");
  auto no_gen = parse_chat(R"("add_generation_prompt": false)", error);
  ASSERT_TRUE(no_gen.has_value()) << error.message;
  EXPECT_FALSE(no_gen->add_generation_prompt);
}

TEST(ChatRequestTest, BodyMustBeAnObjectWithMessages) {
  ApiError error;
  EXPECT_FALSE(parse_chat_request(J("[1]"), tiny_context(), error).has_value());
  EXPECT_EQ(error.status, 400);
  EXPECT_FALSE(parse_chat_request(J(R"({"model": "s4kv-tiny"})"), tiny_context(), error));
  EXPECT_EQ(error.param, "messages");
}

TEST(ChatRequestTest, AnyValueOfAnyFieldIsAnswerNotException) {
  const std::vector<std::string> fields = {"model",
                                           "messages",
                                           "prompt",
                                           "max_tokens",
                                           "max_completion_tokens",
                                           "temperature",
                                           "top_p",
                                           "top_k",
                                           "min_p",
                                           "n",
                                           "stop",
                                           "stop_token_ids",
                                           "seed",
                                           "presence_penalty",
                                           "frequency_penalty",
                                           "repetition_penalty",
                                           "logit_bias",
                                           "logprobs",
                                           "top_logprobs",
                                           "stream",
                                           "stream_options",
                                           "ignore_eos",
                                           "min_tokens",
                                           "include_stop_str_in_output",
                                           "skip_special_tokens",
                                           "echo",
                                           "user",
                                           "tools",
                                           "tool_choice",
                                           "add_generation_prompt",
                                           "continue_final_message",
                                           "chat_template_kwargs",
                                           "response_format",
                                           "suffix",
                                           "best_of",
                                           "functions",
                                           "guided_json",
                                           "add_special_tokens",
                                           "allowed_token_ids",
                                           "use_beam_search",
                                           "priority",
                                           "modalities"};
  const std::vector<std::string> values = {"null",
                                           "true",
                                           "-1",
                                           "0",
                                           "1.5",
                                           "1e300",
                                           "18446744073709551615",
                                           R"("s")",
                                           "[]",
                                           "{}",
                                           "[1]",
                                           R"(["a"])",
                                           R"({"a": 1})",
                                           R"([{"type": 3}])",
                                           R"([{"role": "user"}])",
                                           R"({"type": [1]})",
                                           R"({"include_usage": "x"})"};
  for (const std::string& field : fields) {
    for (const std::string& value : values) {
      OrderedJson body = chat_body();
      body["prompt"] = "x";
      body["stream"] = true;
      body[field] = J(value);
      ApiError chat_error;
      ApiError completion_error;
      EXPECT_NO_THROW(parse_chat_request(body, tiny_context(), chat_error)) << field << value;
      EXPECT_NO_THROW(parse_completion_request(body, tiny_context(), completion_error))
          << field << value;
    }
  }
}

TEST(NormalizeMessagesTest, TextPartsAreJoinedAndFieldsKept) {
  ApiError error;
  auto m = normalize_chat_messages(J(R"([
      {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
      {"role": "developer", "content": "dev"},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
       "name": "bob", "extra": 1}])"),
                                   error);
  ASSERT_TRUE(m.has_value()) << error.message;
  EXPECT_EQ(*m, J(R"([{"role": "system", "content": "Be brief."},
                      {"role": "developer", "content": "dev"},
                      {"role": "user", "content": "a\nb", "name": "bob"}])"));
}

TEST(NormalizeMessagesTest, ToolCallArgumentsAreParsedForTheTemplate) {
  ApiError error;
  auto m = normalize_chat_messages(J(R"([
      {"role": "user", "content": "weather?"},
      {"role": "assistant", "content": null, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"n\": 2}"}},
        {"id": "call_2", "type": "function", "function": {"name": "noop", "arguments": ""}}]},
      {"role": "tool", "content": "sunny", "tool_call_id": "call_1"}])"),
                                   error);
  ASSERT_TRUE(m.has_value()) << error.message;
  EXPECT_TRUE((*m)[1]["content"].is_null());
  EXPECT_EQ((*m)[1]["tool_calls"][0], J(R"({"id": "call_1", "type": "function",
                  "function": {"name": "get_weather", "arguments": {"city": "Paris", "n": 2}}})"));
  EXPECT_EQ((*m)[1]["tool_calls"][1]["function"]["arguments"], OrderedJson::object());
  EXPECT_EQ((*m)[2], J(R"({"role": "tool", "content": "sunny", "tool_call_id": "call_1"})"));
}

TEST(NormalizeMessagesTest, BadMessagesAreRefusedWithParamMessages) {
  const std::vector<std::string> bad = {
      R"({})",
      R"([])",
      R"([1])",
      R"([{"content": "x"}])",
      R"([{"role": "robot", "content": "x"}])",
      R"([{"role": "user"}])",
      R"([{"role": "user", "content": null}])",
      R"([{"role": "user", "content": 5}])",
      R"([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}])",
      R"([{"role": "user", "content": [{"type": "text"}]}])",
      R"([{"role": "user", "content": ["plain"]}])",
      R"([{"role": "user", "content": "x", "name": 5}])",
      R"([{"role": "user", "content": "x", "tool_calls": []}])",
      R"([{"role": "assistant", "content": null, "tool_calls": {}}])",
      R"([{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{"}}]}])",
      R"([{"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]}])"};
  for (const std::string& text : bad) {
    ApiError error;
    EXPECT_FALSE(normalize_chat_messages(J(text), error).has_value()) << text;
    EXPECT_EQ(error.status, 400) << text;
    EXPECT_EQ(error.param, "messages") << text;
  }
  ApiError error;
  normalize_chat_messages(
      J(R"([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}])"), error);
  EXPECT_EQ(error.message,
            "messages[0].content[0]: content part type 'image_url' is not supported (text only).");
}

TEST(CompletionRequestTest, PromptForms) {
  ApiError error;
  auto s = parse_completion(R"({"prompt": "Hello"})", error);
  ASSERT_TRUE(s.has_value()) << error.message;
  ASSERT_EQ(s->prompts.size(), 1u);
  EXPECT_EQ(s->prompts[0].text, "Hello");
  EXPECT_EQ(s->params.max_tokens, std::nullopt);  // 16 is applied with the prompt length
  EXPECT_TRUE(s->add_special_tokens);

  auto strings = parse_completion(R"({"prompt": ["a", "b", "c"]})", error);
  ASSERT_TRUE(strings.has_value()) << error.message;
  ASSERT_EQ(strings->prompts.size(), 3u);
  EXPECT_EQ(strings->prompts[2].text, "c");

  auto ids = parse_completion(R"({"prompt": [1, 2, 8191]})", error);
  ASSERT_TRUE(ids.has_value()) << error.message;
  ASSERT_EQ(ids->prompts.size(), 1u);
  EXPECT_FALSE(ids->prompts[0].text.has_value());
  EXPECT_EQ(ids->prompts[0].token_ids, (std::vector<int32_t>{1, 2, 8191}));

  auto lists = parse_completion(R"({"prompt": [[1, 2], [3]]})", error);
  ASSERT_TRUE(lists.has_value()) << error.message;
  ASSERT_EQ(lists->prompts.size(), 2u);
  EXPECT_EQ(lists->prompts[1].token_ids, std::vector<int32_t>{3});
}

TEST(CompletionRequestTest, BadPromptsAreRefusedWithParamPrompt) {
  for (const char* prompt :
       {R"([])", R"([[]])", R"([[1], []])", R"([1, "a"])", R"(["a", 1])", R"([[1], "a"])",
        R"([8192])", R"([-1])", R"([[1, 8192]])", R"(5)", R"({"a": 1})", R"([1.5])", R"([true])"}) {
    expect_completion_refused(std::string(R"({"prompt": )") + prompt + "}", "prompt");
  }
  expect_completion_refused(R"({"max_tokens": 5})", "prompt");
  std::string many = R"({"prompt": [)";
  for (size_t i = 0; i <= kMaxPrompts; ++i) many += i == 0 ? "\"a\"" : ", \"a\"";
  expect_completion_refused(many + "]}", "prompt");
}

TEST(CompletionRequestTest, LongTokenIdListIsOnePromptNotManyPrompts) {
  // The prompt-count limit is for lists of prompts; a long token-id list is one prompt, left
  // to the context-length check (code context_length_exceeded), not refused here.
  std::string ids = R"({"prompt": [)";
  for (size_t i = 0; i <= 2 * kMaxPrompts; ++i) ids += i == 0 ? "1" : ", 1";
  ApiError error;
  auto r = parse_completion(ids + "]}", error);
  ASSERT_TRUE(r) << error.message;
  ASSERT_EQ(r->prompts.size(), 1u);
  EXPECT_EQ(r->prompts[0].token_ids.size(), 2 * kMaxPrompts + 1);
}

TEST(CompletionRequestTest, CompletionFields) {
  ApiError error;
  auto r = parse_completion(
      R"({"prompt": "x", "model": "s4kv-tiny", "max_tokens": 7, "logprobs": 3, "stream": true,
          "stream_options": {"include_usage": true}, "add_special_tokens": false,
          "temperature": 0.2, "seed": 3, "suffix": ""})",
      error);
  ASSERT_TRUE(r.has_value()) << error.message;
  EXPECT_EQ(r->params.max_tokens, 7);
  EXPECT_EQ(r->params.logprobs, 3);
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->stream_options.include_usage);
  EXPECT_FALSE(r->add_special_tokens);
  EXPECT_DOUBLE_EQ(r->params.temperature, 0.2);
  auto echo = parse_completion(R"({"prompt": "x", "echo": true})", error);
  ASSERT_TRUE(echo.has_value()) << error.message;
  EXPECT_TRUE(echo->echo);

  expect_completion_refused(R"({"prompt": "x", "echo": true, "logprobs": 1})", "echo");
  expect_completion_refused(R"({"prompt": "x", "suffix": "end"})", "suffix");
  expect_completion_refused(R"({"prompt": "x", "logprobs": 21})", "logprobs");
  expect_completion_refused(R"({"prompt": "x", "logprobs": true})", "logprobs");
  expect_completion_refused(R"({"prompt": "x", "echo": "yes"})", "echo");
  expect_completion_refused(R"({"prompt": "x", "best_of": 3, "n": 2})", "best_of");
  expect_completion_refused(R"({"prompt": "x", "best_of": 1, "n": 2})", "best_of");
  expect_completion_refused(R"({"prompt": "x", "prompt_logprobs": 0})", "prompt_logprobs");
  expect_completion_refused(R"({"prompt": "x", "stream_options": {}})", "stream_options");
  ApiError not_found;
  EXPECT_FALSE(parse_completion(R"({"prompt": "x", "model": "other"})", not_found));
  EXPECT_EQ(not_found.status, 404);
}

class TinyModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto t = tokenizer::Tokenizer::from_file(std::string(kModelDir) + "/tokenizer.json");
    ASSERT_TRUE(t.is_ok()) << t.status().message();
    tokenizer_ = new tokenizer::Tokenizer(std::move(t).value());
    auto c = tokenizer::ChatTemplate::load(kModelDir);
    ASSERT_TRUE(c.is_ok()) << c.status().message();
    template_ = new tokenizer::ChatTemplate(std::move(c).value());
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete template_;
  }
  std::vector<int32_t> encode(const std::string& text, bool special) {
    auto ids = tokenizer_->encode(text, special);
    EXPECT_TRUE(ids.is_ok());
    return ids.is_ok() ? *ids : std::vector<int32_t>{};
  }

  static tokenizer::Tokenizer* tokenizer_;
  static tokenizer::ChatTemplate* template_;
};
tokenizer::Tokenizer* TinyModelTest::tokenizer_ = nullptr;
tokenizer::ChatTemplate* TinyModelTest::template_ = nullptr;

TEST_F(TinyModelTest, ChatPromptIsTheRenderedTemplateTokenized) {
  ApiError error;
  auto r = parse_chat_request(J(R"({"messages": [{"role": "system", "content": "S"},
                         {"role": "user", "content": [{"type": "text", "text": "Hi"}]}]})"),
                              tiny_context(), error);
  ASSERT_TRUE(r.has_value()) << error.message;
  auto ids = chat_prompt_ids(*r, *template_, *tokenizer_, error);
  ASSERT_TRUE(ids.has_value()) << error.message;
  EXPECT_EQ(*ids, encode("<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                         "<|im_start|>assistant\n",
                         false));
  EXPECT_EQ((*ids)[0], 8190);  // <|im_start|> as the special token
}

TEST_F(TinyModelTest, ChatPromptWithToolsAndToolCalls) {
  ApiError error;
  auto r = parse_chat_request(J(R"({"messages": [{"role": "user", "content": "w?"},
              {"role": "assistant", "content": null, "tool_calls": [{"id": "c1",
                "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}]},
              {"role": "tool", "content": "ok", "tool_call_id": "c1"}],
            "tools": [{"type": "function", "function": {"name": "f"}}],
            "add_generation_prompt": false})"),
                              tiny_context(), error);
  ASSERT_TRUE(r.has_value()) << error.message;
  auto ids = chat_prompt_ids(*r, *template_, *tokenizer_, error);
  ASSERT_TRUE(ids.has_value()) << error.message;
  const std::string text = tokenizer_->decode(*ids, false);
  EXPECT_NE(text.find(R"(<tools>
{"type": "function", "function": {"name": "f"}}
</tools>)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(R"(<tool_call>
{"name": "f", "arguments": {"a": 1}}
</tool_call><|im_end|>)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("<tool_response>\nok\n</tool_response>"), std::string::npos) << text;
  EXPECT_EQ(text.substr(text.size() - 11), "<|im_end|>\n");
}

TEST_F(TinyModelTest, ContinueFinalMessageEndsTheRenderingAfterIt) {
  ApiError error;
  auto r = parse_chat_request(J(R"({"messages": [{"role": "user", "content": "Hi"},
                         {"role": "assistant", "content": "Once upon "}],
            "continue_final_message": true})"),
                              tiny_context(), error);
  ASSERT_TRUE(r.has_value()) << error.message;
  auto ids = chat_prompt_ids(*r, *template_, *tokenizer_, error);
  ASSERT_TRUE(ids.has_value()) << error.message;
  EXPECT_EQ(tokenizer_->decode(*ids, false),
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi"
            "<|im_end|>\n<|im_start|>assistant\nOnce upon");
}

TEST_F(TinyModelTest, CompletionPromptsAreTokenizedAndEchoTextKept) {
  ApiError error;
  auto r =
      parse_completion_request(J(R"({"prompt": ["Hello world", "x"]})"), tiny_context(), error);
  ASSERT_TRUE(r.has_value()) << error.message;
  auto prompts = completion_prompts(*r, *tokenizer_, error);
  ASSERT_TRUE(prompts.has_value()) << error.message;
  ASSERT_EQ(prompts->size(), 2u);
  EXPECT_EQ((*prompts)[0].token_ids, encode("Hello world", true));
  EXPECT_EQ((*prompts)[0].text, "Hello world");

  const std::vector<int32_t> ids = encode("Hello<|im_end|>", true);
  OrderedJson body;
  body["prompt"] = ids;
  body["echo"] = true;
  auto by_ids = parse_completion_request(body, tiny_context(), error);
  ASSERT_TRUE(by_ids.has_value()) << error.message;
  auto decoded = completion_prompts(*by_ids, *tokenizer_, error);
  ASSERT_TRUE(decoded.has_value()) << error.message;
  EXPECT_EQ((*decoded)[0].token_ids, ids);
  EXPECT_EQ((*decoded)[0].text, "Hello<|im_end|>");

  auto empty = parse_completion_request(J(R"({"prompt": ""})"), tiny_context(), error);
  ASSERT_TRUE(empty.has_value()) << error.message;
  EXPECT_FALSE(completion_prompts(*empty, *tokenizer_, error).has_value());
  EXPECT_EQ(error.param, "prompt");
}

TEST(ResolveMaxTokensTest, RequestedDefaultAndCapped) {
  ModelContext m = tiny_context();  // max_model_len 256
  ApiError error;
  engine::SamplingParams p;
  EXPECT_EQ(resolve_request_max_tokens(p, std::nullopt, 56, m, "messages", error), 200);
  EXPECT_EQ(resolve_request_max_tokens(p, 16, 56, m, "prompt", error), 16);
  EXPECT_EQ(resolve_request_max_tokens(p, 16, 250, m, "prompt", error), 6);
  m.generation_config.max_new_tokens = 100;
  EXPECT_EQ(resolve_request_max_tokens(p, std::nullopt, 56, m, "messages", error), 100);
  p.max_tokens = 150;  // an explicit value is not capped by max_new_tokens
  EXPECT_EQ(resolve_request_max_tokens(p, std::nullopt, 56, m, "messages", error), 150);
  p.max_tokens = 200;
  EXPECT_EQ(resolve_request_max_tokens(p, std::nullopt, 56, m, "messages", error), 200);
}

TEST(ResolveMaxTokensTest, ContextLengthExceeded) {
  ModelContext m = tiny_context();
  m.max_model_len = 2048;
  ApiError error;
  engine::SamplingParams p;
  p.max_tokens = 2000;
  EXPECT_FALSE(resolve_request_max_tokens(p, std::nullopt, 100, m, "messages", error));
  EXPECT_EQ(error.status, 400);
  EXPECT_EQ(error.code, "context_length_exceeded");
  EXPECT_EQ(error.param, "messages");
  EXPECT_EQ(error.message,
            "This model's maximum context length is 2048 tokens. However, you requested 2100 "
            "tokens (100 in the messages, 2000 in the completion). Please reduce the length of "
            "the messages or completion.");
  p.max_tokens.reset();
  EXPECT_FALSE(resolve_request_max_tokens(p, 16, 2048, m, "prompt", error));
  EXPECT_EQ(error.code, "context_length_exceeded");
  EXPECT_EQ(error.param, "prompt");
  EXPECT_EQ(error.message,
            "This model's maximum context length is 2048 tokens. However, your request has 2048 "
            "input tokens. Please reduce the length of the prompt.");
}

}  // namespace
}  // namespace s4kv::server
