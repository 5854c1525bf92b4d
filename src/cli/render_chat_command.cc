#include "cli/render_chat_command.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <iostream>
#include <iterator>
#include <memory>

#include "cli/command.h"
#include "model/model_path.h"
#include "tokenizer/chat_template.h"

namespace s4kv::cli {
namespace {

constexpr size_t kMaxInputBytes = 64u << 20;

Result<std::string> read_stdin() {
  std::string text;
  char buf[65536];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), stdin)) > 0) {
    text.append(buf, n);
    if (text.size() > kMaxInputBytes) {
      return invalid_argument("stdin holds more than " + std::to_string(kMaxInputBytes) + " bytes");
    }
  }
  return text;
}

Result<std::string> render(const RenderChatOptions& o) {
  S4KV_ASSIGN_OR_RETURN(std::string model_dir, model::resolve_model_path(o.model));
  S4KV_ASSIGN_OR_RETURN(tokenizer::ChatTemplate tmpl,
                        tokenizer::ChatTemplate::load(model_dir, o.chat_template));
  S4KV_ASSIGN_OR_RETURN(std::string text, read_stdin());
  S4KV_ASSIGN_OR_RETURN(OrderedJson input, parse_ordered_json(text, "stdin"));
  if (!input.is_object()) return invalid_argument("stdin must hold one JSON object");
  for (const auto& [key, value] : input.items()) {
    if (key != "messages" && key != "tools" && key != "chat_template_kwargs") {
      return invalid_argument("unknown field \"" + key +
                              "\" on stdin (expected messages, tools, chat_template_kwargs)");
    }
  }
  if (!input.contains("messages") || !input["messages"].is_array()) {
    return invalid_argument("stdin: \"messages\" must be an array");
  }
  const OrderedJson tools = input.contains("tools") ? input["tools"] : nullptr;
  const OrderedJson kwargs = input.contains("chat_template_kwargs") ? input["chat_template_kwargs"]
                                                                    : OrderedJson::object();
  return tmpl.render(input["messages"], tools, o.add_generation_prompt, kwargs);
}

}  // namespace

int run_render_chat(const RenderChatOptions& options) {
  try {
    auto prompt = render(options);
    if (!prompt.is_ok()) {
      std::string line = prompt.status().message();
      std::replace(line.begin(), line.end(), '\n', ' ');
      std::fprintf(stderr, "error: %s\n", line.c_str());
      return 2;
    }
    std::fwrite(prompt->data(), 1, prompt->size(), stdout);
    std::fflush(stdout);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: render-chat failed: %s\n", e.what());
    return 2;
  }
}

void add_render_chat_command(CLI::App& app) {
  auto options = std::make_shared<RenderChatOptions>();
  CLI::App* sub = app.add_subcommand(
      "render-chat", "Render a conversation (JSON on stdin) with the model's chat template");
  sub->add_option("--model", options->model,
                  "model directory, or ORG/NAME in the local Hugging Face cache")
      ->required();
  sub->add_flag("--add-generation-prompt", options->add_generation_prompt,
                "end the prompt with the assistant turn's opening");
  sub->add_option("--chat-template", options->chat_template,
                  "Jinja template file overriding the model's chat template");
  sub->callback([options] { exit_code() = run_render_chat(*options); });
}

}  // namespace s4kv::cli
