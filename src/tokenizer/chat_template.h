// Chat templates: the model's Jinja template (from tokenizer_config.json's chat_template, a
// chat_template.jinja next to it, or an operator's --chat-template file; never from a
// request) rendered exactly as transformers' apply_chat_template renders it: variables
// messages, tools, documents (None), add_generation_prompt, the tokenizer's special tokens
// (bos_token, eos_token ... only those set) and any extra template kwargs. Immutable after
// loading; render() may be called from many threads at once.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/json.h"
#include "common/status.h"
#include "tokenizer/jinja/json_value.h"
#include "tokenizer/jinja/template.h"

namespace s4kv::tokenizer {

class ChatTemplate {
 public:
  // Largest template file and tokenizer_config.json read.
  static constexpr size_t kMaxTemplateBytes = 1u << 20;
  static constexpr size_t kMaxConfigBytes = 16u << 20;

  // From a model directory: chat_template_file when given, else <dir>/chat_template.jinja when
  // present, else tokenizer_config.json's chat_template. Special tokens come from
  // <dir>/tokenizer_config.json when it exists.
  static Result<ChatTemplate> load(const std::string& model_dir,
                                   const std::string& chat_template_file = "");
  // From a parsed tokenizer_config.json; `origin` names it in messages. chat_template may be
  // a string or a list of {"name", "template"}, of which "default" is used.
  static Result<ChatTemplate> from_tokenizer_config(const Json& config, const std::string& origin);
  // From template source, with the special tokens given as name -> text.
  static Result<ChatTemplate> from_source(
      std::string_view source, std::vector<std::pair<std::string, jinja::Value>> special_tokens);

  // messages: a JSON array; tools: an array or null (rendered as None, as transformers does
  // without tools); extra: an object of further template variables (e.g. enable_thinking).
  Result<std::string> render(const OrderedJson& messages, const OrderedJson& tools,
                             bool add_generation_prompt,
                             const OrderedJson& extra = OrderedJson::object(),
                             const jinja::RenderLimits& limits = {}) const;

  const std::string& source() const { return source_; }

 private:
  jinja::Template template_;
  std::string source_;
  std::vector<std::pair<std::string, jinja::Value>> special_tokens_;
};

// The special tokens transformers passes to templates, from a tokenizer_config.json:
// bos/eos/unk/sep/pad/cls/mask tokens (strings or {"content": ...}) and
// additional_special_tokens, each only when set and non-empty.
std::vector<std::pair<std::string, jinja::Value>> special_tokens_from_config(const Json& config);

}  // namespace s4kv::tokenizer
