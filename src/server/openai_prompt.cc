// Prompts of OpenAI requests: chat messages checked and shaped for the chat template (text
// parts joined, tool-call arguments parsed to JSON as vLLM does), the conversation rendered
// and tokenized (no special tokens added: the template writes them), completion prompts
// tokenized (with them), and max_tokens resolved against the context. Stateless.
#include <algorithm>
#include <array>
#include <utility>

#include "server/openai_protocol.h"

namespace s4kv::server {
namespace {

constexpr std::array<std::string_view, 5> kRoles = {"system", "developer", "user", "assistant",
                                                    "tool"};
constexpr std::string_view kWhitespace = " \t\n\r\f\v";

ApiError message_error(const std::string& where, const std::string& what) {
  return bad_request(where + ": " + what, "messages");
}

ApiError message_type_error(const std::string& where, std::string_view expected,
                            const OrderedJson& got) {
  return message_error(
      where, "expected " + std::string(expected) + ", got " + std::string(json_kind(got)) + ".");
}

// A message's content: a string, text parts joined with "\n", or null (assistant only).
std::optional<OrderedJson> normalize_content(const OrderedJson& message, const std::string& where,
                                             bool assistant, ApiError& error) {
  const auto it = message.find("content");
  if (it == message.end() || it->is_null()) {
    if (assistant) return OrderedJson(nullptr);
    error = message_error(where + ".content", "field required.");
    return std::nullopt;
  }
  if (it->is_string()) return *it;
  if (!it->is_array()) {
    error = message_type_error(where + ".content", "string or array of content parts", *it);
    return std::nullopt;
  }
  std::string text;
  for (size_t i = 0; i < it->size(); ++i) {
    const OrderedJson& part = (*it)[i];
    const std::string at = where + ".content[" + std::to_string(i) + "]";
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
      error = message_error(at, "expected a content part object with a string \"type\".");
      return std::nullopt;
    }
    const std::string type = part["type"].get<std::string>();
    if (type != "text") {
      error = message_error(at, "content part type '" + type + "' is not supported (text only).");
      return std::nullopt;
    }
    if (!part.contains("text") || !part["text"].is_string()) {
      error = message_error(at + ".text", "expected string.");
      return std::nullopt;
    }
    if (i > 0) text += '\n';
    text += part["text"].get<std::string>();
  }
  return OrderedJson(std::move(text));
}

// A tool call's function.arguments for the template: a JSON string parsed to its value
// (empty or absent: {}); an object is kept.
std::optional<OrderedJson> tool_arguments(const OrderedJson& function, const std::string& where,
                                          ApiError& error) {
  const auto it = function.find("arguments");
  if (it == function.end() || it->is_null()) return OrderedJson::object();
  if (it->is_object() || it->is_array()) return *it;
  if (!it->is_string()) {
    error = message_type_error(where, "a JSON string", *it);
    return std::nullopt;
  }
  const std::string& s = it->get_ref<const std::string&>();
  if (s.find_first_not_of(kWhitespace) == std::string::npos) return OrderedJson::object();
  auto parsed = parse_ordered_json(s, "arguments", kRequestJsonLimits);
  if (!parsed.is_ok()) {
    error = message_error(where, "is not valid JSON: " + parsed.status().message());
    return std::nullopt;
  }
  return std::move(parsed).value();
}

std::optional<OrderedJson> normalize_tool_calls(const OrderedJson& calls, const std::string& where,
                                                ApiError& error) {
  if (!calls.is_array()) {
    error = message_type_error(where, "array", calls);
    return std::nullopt;
  }
  OrderedJson out = OrderedJson::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    const OrderedJson& call = calls[i];
    const std::string at = where + "[" + std::to_string(i) + "]";
    const bool ok = call.is_object() && call.contains("function") && call["function"].is_object() &&
                    call["function"].contains("name") && call["function"]["name"].is_string() &&
                    (!call.contains("id") || call["id"].is_string());
    if (!ok) {
      error = message_error(at,
                            "expected {\"id\", \"type\": \"function\", \"function\": "
                            "{\"name\", \"arguments\"}}.");
      return std::nullopt;
    }
    auto arguments = tool_arguments(call["function"], at + ".function.arguments", error);
    if (!arguments) return std::nullopt;
    OrderedJson item;
    if (call.contains("id")) item["id"] = call["id"];
    item["type"] = "function";
    item["function"]["name"] = call["function"]["name"];
    item["function"]["arguments"] = std::move(*arguments);
    out.push_back(std::move(item));
  }
  return out;
}

std::optional<OrderedJson> normalize_message(const OrderedJson& m, const std::string& where,
                                             ApiError& error) {
  if (!m.is_object()) {
    error = message_type_error(where, "object", m);
    return std::nullopt;
  }
  const auto role = m.find("role");
  if (role == m.end() || !role->is_string() ||
      std::find(kRoles.begin(), kRoles.end(), role->get_ref<const std::string&>()) ==
          kRoles.end()) {
    error =
        message_error(where + ".role", "expected one of system, developer, user, assistant, tool.");
    return std::nullopt;
  }
  const bool assistant = *role == "assistant";
  auto content = normalize_content(m, where, assistant, error);
  if (!content) return std::nullopt;
  OrderedJson out;
  out["role"] = *role;
  out["content"] = std::move(*content);
  for (const char* key : {"name", "tool_call_id"}) {
    const auto it = m.find(key);
    if (it == m.end() || it->is_null()) continue;
    if (!it->is_string()) {
      error = message_type_error(where + "." + key, "string", *it);
      return std::nullopt;
    }
    out[key] = *it;
  }
  const auto calls = m.find("tool_calls");
  if (calls != m.end() && !calls->is_null()) {
    if (!assistant) {
      error = message_error(where + ".tool_calls", "only assistant messages carry tool calls.");
      return std::nullopt;
    }
    auto normalized = normalize_tool_calls(*calls, where + ".tool_calls", error);
    if (!normalized) return std::nullopt;
    out["tool_calls"] = std::move(*normalized);
  }
  return out;
}

// transformers' continue_final_message: the rendering ends right after the final message's
// text, so the model continues it instead of starting a new turn.
std::optional<std::string> cut_after_final_message(std::string rendered,
                                                   const OrderedJson& messages, ApiError& error) {
  const OrderedJson& content = messages.back()["content"];
  if (!content.is_string()) return rendered;
  std::string final_text = content.get<std::string>();
  const size_t begin = final_text.find_first_not_of(kWhitespace);
  if (begin == std::string::npos) return rendered;
  final_text = final_text.substr(begin, final_text.find_last_not_of(kWhitespace) + 1 - begin);
  const size_t at = rendered.rfind(final_text);
  if (at == std::string::npos) {
    error = bad_request(
        "continue_final_message is set but the final message does not appear in the chat after "
        "applying the chat template.",
        "messages");
    return std::nullopt;
  }
  rendered.resize(at + final_text.size());
  return rendered;
}

ApiError context_error(const std::string& message, const std::string& param) {
  return api_error(400, message, param, "context_length_exceeded");
}

}  // namespace

std::optional<OrderedJson> normalize_chat_messages(const OrderedJson& messages, ApiError& error) {
  if (!messages.is_array()) {
    error = bad_request("messages: expected array, got " + std::string(json_kind(messages)) + ".",
                        "messages");
    return std::nullopt;
  }
  if (messages.empty()) {
    error = bad_request("messages: at least one message is required.", "messages");
    return std::nullopt;
  }
  if (messages.size() > kMaxMessages) {
    error = bad_request("messages: at most " + std::to_string(kMaxMessages) +
                            " messages per request, got " + std::to_string(messages.size()) + ".",
                        "messages");
    return std::nullopt;
  }
  OrderedJson out = OrderedJson::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    auto m = normalize_message(messages[i], "messages[" + std::to_string(i) + "]", error);
    if (!m) return std::nullopt;
    out.push_back(std::move(*m));
  }
  return out;
}

std::optional<std::vector<int32_t>> chat_prompt_ids(const ChatRequest& request,
                                                    const tokenizer::ChatTemplate& chat_template,
                                                    const tokenizer::Tokenizer& tokenizer,
                                                    ApiError& error) {
  auto rendered = chat_template.render(request.messages, request.tools,
                                       request.add_generation_prompt, request.chat_template_kwargs);
  if (!rendered.is_ok()) {
    error = bad_request(rendered.status().message(), "messages");
    return std::nullopt;
  }
  std::string text = std::move(rendered).value();
  if (request.continue_final_message) {
    auto cut = cut_after_final_message(std::move(text), request.messages, error);
    if (!cut) return std::nullopt;
    text = std::move(*cut);
  }
  auto ids = tokenizer.encode(text, request.add_special_tokens);
  if (!ids.is_ok()) {
    error = bad_request(ids.status().message(), "messages");
    return std::nullopt;
  }
  if (ids->empty()) {
    error = bad_request("messages: the rendered conversation has no tokens.", "messages");
    return std::nullopt;
  }
  return std::move(ids).value();
}

std::optional<std::vector<TokenizedPrompt>> completion_prompts(
    const CompletionRequest& request, const tokenizer::Tokenizer& tokenizer, ApiError& error) {
  std::vector<TokenizedPrompt> out;
  out.reserve(request.prompts.size());
  for (const CompletionPrompt& p : request.prompts) {
    TokenizedPrompt t;
    if (p.text) {
      auto ids = tokenizer.encode(*p.text, request.add_special_tokens);
      if (!ids.is_ok()) {
        error = bad_request(ids.status().message(), "prompt");
        return std::nullopt;
      }
      t.token_ids = std::move(ids).value();
      t.text = *p.text;
    } else {
      t.token_ids = p.token_ids;
      if (request.echo) t.text = tokenizer.decode(t.token_ids, /*skip_special_tokens=*/false);
    }
    if (t.token_ids.empty()) {
      error = bad_request("prompt: the prompt cannot be empty.", "prompt");
      return std::nullopt;
    }
    out.push_back(std::move(t));
  }
  return out;
}

std::optional<int64_t> resolve_request_max_tokens(const engine::SamplingParams& params,
                                                  std::optional<int64_t> default_max_tokens,
                                                  int64_t num_prompt_tokens,
                                                  const ModelContext& model,
                                                  const std::string& param, ApiError& error) {
  const int64_t max_len = model.max_model_len;
  const std::string head =
      "This model's maximum context length is " + std::to_string(max_len) + " tokens. However, ";
  const std::string input = param == "messages" ? "messages" : "prompt";
  if (params.max_tokens) {
    const int64_t want = *params.max_tokens;
    if (num_prompt_tokens + want <= max_len) return want;
    error = context_error(
        head + "you requested " + std::to_string(num_prompt_tokens + want) + " tokens (" +
            std::to_string(num_prompt_tokens) + " in the " + input + ", " + std::to_string(want) +
            " in the completion). Please reduce the length of the " + input + " or completion.",
        param);
    return std::nullopt;
  }
  const int64_t left = max_len - num_prompt_tokens;
  if (left < 1) {
    error = context_error(head + "your request has " + std::to_string(num_prompt_tokens) +
                              " input tokens. Please reduce the length of the " + input + ".",
                          param);
    return std::nullopt;
  }
  int64_t max_tokens = left;
  if (default_max_tokens) max_tokens = std::min(max_tokens, *default_max_tokens);
  const std::optional<int64_t>& cap = model.generation_config.max_new_tokens;
  if (cap && *cap > 0) max_tokens = std::min(max_tokens, *cap);
  return max_tokens;
}

}  // namespace s4kv::server
