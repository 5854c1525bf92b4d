// libFuzzer target for the sandboxed Jinja engine on arbitrary template source (an operator's
// --chat-template, or a chat_template in a downloaded tokenizer_config.json): lexing, parsing,
// the filter/test check and rendering with a small conversation, tools and special tokens,
// under a tight step and output budget. Any source gives either a Status with a message or a
// rendering; a template that is valid UTF-8 renders to valid UTF-8.
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/check.h"
#include "common/json.h"
#include "fuzz_support.h"
#include "tokenizer/chat_template.h"

namespace {

const s4kv::OrderedJson& messages() {
  static const auto* m = new s4kv::OrderedJson(s4kv::OrderedJson::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Héllo, wörld! 你好 🎉"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
      "function": {"name": "f", "arguments": {"x": 1, "y": [true, 2.5, "z"]}}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "42"},
    {"role": "user", "content": [{"type": "text", "text": "part"}]}])"));
  return *m;
}

const s4kv::OrderedJson& tools() {
  static const auto* t = new s4kv::OrderedJson(s4kv::OrderedJson::parse(R"([
    {"type": "function", "function": {"name": "f", "description": "d",
      "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}}])"));
  return *t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace jinja = s4kv::tokenizer::jinja;
  const std::string_view source = s4kv::fuzz::as_text(data, size);
  auto t = s4kv::tokenizer::ChatTemplate::from_source(
      source,
      {{"bos_token", jinja::Value::string("<s>")}, {"eos_token", jinja::Value::string("</s>")}});
  if (!t.is_ok()) {
    S4KV_CHECK(!t.status().message().empty());
    return 0;
  }
  const jinja::RenderLimits limits{
      .max_steps = 20'000, .max_output_bytes = 1u << 20, .max_recursion_depth = 16};
  for (bool add_generation_prompt : {false, true}) {
    auto out =
        t->render(messages(), add_generation_prompt ? tools() : s4kv::OrderedJson(nullptr),
                  add_generation_prompt, s4kv::OrderedJson{{"enable_thinking", false}}, limits);
    if (!out.is_ok()) {
      S4KV_CHECK(!out.status().message().empty());
      continue;
    }
    S4KV_CHECK(out->size() <= limits.max_output_bytes, "output over the cap: ", out->size());
    if (s4kv::fuzz::is_valid_utf8(source)) {
      S4KV_CHECK(s4kv::fuzz::is_valid_utf8(*out), "valid template rendered invalid UTF-8");
    }
  }
  return 0;
}
