// `s4kv render-chat`: renders a conversation with a model's chat template, as the server
// will before tokenizing. Reads one JSON object {"messages": [...], "tools": [...],
// "chat_template_kwargs": {...}} (tools and kwargs optional) from stdin and writes the prompt
// to stdout exactly, without a trailing newline. The template comes from the model
// (tokenizer_config.json or chat_template.jinja) or --chat-template FILE. Errors exit 2 with
// one `error: ...` line on stderr.
#pragma once

#include <string>

namespace CLI {
class App;
}  // namespace CLI

namespace s4kv::cli {

struct RenderChatOptions {
  std::string model;                   // --model: directory or ORG/NAME
  std::string chat_template;           // --chat-template: file overriding the model's template
  bool add_generation_prompt = false;  // --add-generation-prompt
};

// Reads stdin, renders, prints; returns the exit code (0 or 2). Never throws.
int run_render_chat(const RenderChatOptions& options);

void add_render_chat_command(CLI::App& app);

}  // namespace s4kv::cli
