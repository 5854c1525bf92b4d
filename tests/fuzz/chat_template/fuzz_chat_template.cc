// libFuzzer target for the bundled model's chat template rendered with arbitrary JSON: a
// document {"messages", "tools"?, "add_generation_prompt"?, "chat_template_kwargs"?} (or a bare
// array of messages), passed to ChatTemplate::render as it is, without the server's message
// normalization, under the server's default limits, so that odd types reach the interpreter
// (content as a number, role missing, tool_calls as a string ...). Either a Status with a
// message, or valid UTF-8 that tokenizes.
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/check.h"
#include "common/json.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using s4kv::OrderedJson;
  auto doc = s4kv::parse_ordered_json(s4kv::fuzz::as_text(data, size), "fuzz",
                                      s4kv::JsonLimits{.max_depth = 64});
  if (!doc.is_ok()) return 0;
  OrderedJson messages = *doc;
  OrderedJson tools = nullptr;
  OrderedJson extra = OrderedJson::object();
  bool add_generation_prompt = true;
  if (doc->is_object()) {
    messages = doc->value("messages", OrderedJson::array());
    tools = doc->value("tools", OrderedJson(nullptr));
    extra = doc->value("chat_template_kwargs", OrderedJson::object());
    if (auto it = doc->find("add_generation_prompt"); it != doc->end() && it->is_boolean()) {
      add_generation_prompt = it->get<bool>();
    }
  }
  auto out =
      s4kv::fuzz::bundled_chat_template().render(messages, tools, add_generation_prompt, extra);
  if (!out.is_ok()) {
    S4KV_CHECK(!out.status().message().empty());
    return 0;
  }
  S4KV_CHECK(s4kv::fuzz::is_valid_utf8(*out), "rendering is not valid UTF-8");
  auto ids = s4kv::fuzz::bundled_tokenizer().encode(*out, false);
  if (!ids.is_ok()) S4KV_CHECK(!ids.status().message().empty());
  return 0;
}
