#include "tokenizer/chat_template.h"

#include "common/file.h"

namespace s4kv::tokenizer {
namespace {

// A token in tokenizer_config.json: "text", {"content": "text", ...} or null.
std::string token_text(const Json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) {
    return j["content"].get<std::string>();
  }
  return "";
}

Result<std::string> select_template(const Json& config, const std::string& origin) {
  if (!config.is_object() || !config.contains("chat_template") ||
      config["chat_template"].is_null()) {
    return not_found(origin + " has no chat_template (pass --chat-template FILE)");
  }
  const Json& t = config["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array()) {
    std::string names;
    for (const Json& e : t) {
      if (!e.is_object() || !e.contains("name") || !e.contains("template") ||
          !e["name"].is_string() || !e["template"].is_string()) {
        return invalid_argument(
            origin +
            ": chat_template list entries must be {\"name\": string, \"template\": string}");
      }
      if (e["name"] == "default") return e["template"].get<std::string>();
      names += (names.empty() ? "" : ", ") + e["name"].get<std::string>();
    }
    return invalid_argument(origin + ": chat_template lists several templates (" + names +
                            ") and none is named \"default\" (pass --chat-template FILE)");
  }
  return invalid_argument(origin + ": chat_template must be a string or a list, not " +
                          std::string(json_type_name(t)));
}

}  // namespace

std::vector<std::pair<std::string, jinja::Value>> special_tokens_from_config(const Json& config) {
  std::vector<std::pair<std::string, jinja::Value>> out;
  if (!config.is_object()) return out;
  for (const char* name : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                           "cls_token", "mask_token"}) {
    if (!config.contains(name)) continue;
    std::string text = token_text(config[name]);
    if (!text.empty()) out.emplace_back(name, jinja::Value::string(std::move(text)));
  }
  if (config.contains("additional_special_tokens") &&
      config["additional_special_tokens"].is_array()) {
    std::vector<jinja::Value> tokens;
    for (const Json& t : config["additional_special_tokens"]) {
      std::string text = token_text(t);
      if (!text.empty()) tokens.push_back(jinja::Value::string(std::move(text)));
    }
    if (!tokens.empty())
      out.emplace_back("additional_special_tokens", jinja::Value::list(std::move(tokens)));
  }
  return out;
}

Result<ChatTemplate> ChatTemplate::from_source(
    std::string_view source, std::vector<std::pair<std::string, jinja::Value>> special_tokens) {
  S4KV_ASSIGN_OR_RETURN(jinja::Template t, jinja::Template::parse(source));
  ChatTemplate ct;
  ct.template_ = std::move(t);
  ct.source_ = std::string(source);
  ct.special_tokens_ = std::move(special_tokens);
  return ct;
}

Result<ChatTemplate> ChatTemplate::from_tokenizer_config(const Json& config,
                                                         const std::string& origin) {
  S4KV_ASSIGN_OR_RETURN(std::string source, select_template(config, origin));
  auto t = from_source(source, special_tokens_from_config(config));
  if (!t.is_ok()) return Status(t.status().code(), origin + ": " + t.status().message());
  return t;
}

Result<ChatTemplate> ChatTemplate::load(const std::string& model_dir,
                                        const std::string& chat_template_file) {
  const std::string config_path = model_dir + "/tokenizer_config.json";
  Json config = Json::object();
  if (is_regular_file(config_path)) {
    S4KV_ASSIGN_OR_RETURN(config, read_json_file(config_path, kMaxConfigBytes));
  }
  std::string file = chat_template_file;
  if (file.empty() && is_regular_file(model_dir + "/chat_template.jinja")) {
    file = model_dir + "/chat_template.jinja";
  }
  if (file.empty()) {
    if (!is_regular_file(config_path)) {
      return not_found(model_dir + " has no tokenizer_config.json (pass --chat-template FILE)");
    }
    return from_tokenizer_config(config, config_path);
  }
  S4KV_ASSIGN_OR_RETURN(std::string source, read_file(file, kMaxTemplateBytes));
  auto t = from_source(source, special_tokens_from_config(config));
  if (!t.is_ok()) return Status(t.status().code(), file + ": " + t.status().message());
  return t;
}

Result<std::string> ChatTemplate::render(const OrderedJson& messages, const OrderedJson& tools,
                                         bool add_generation_prompt, const OrderedJson& extra,
                                         const jinja::RenderLimits& limits) const {
  if (!messages.is_array()) return invalid_argument("messages must be an array");
  if (!tools.is_null() && !tools.is_array())
    return invalid_argument("tools must be an array or null");
  if (!extra.is_object()) return invalid_argument("chat template kwargs must be an object");
  // transformers: render(messages=, tools=, documents=, add_generation_prompt=,
  // **special_tokens_map, **kwargs). The fixed four are bound last so nothing overrides them.
  jinja::Variables vars = special_tokens_;
  for (const auto& [k, v] : extra.items()) vars.emplace_back(k, jinja::from_json(v));
  vars.emplace_back("messages", jinja::from_json(messages));
  vars.emplace_back("tools", jinja::from_json(tools));
  vars.emplace_back("documents", jinja::Value::none());
  vars.emplace_back("add_generation_prompt", jinja::Value::boolean(add_generation_prompt));
  return template_.render(vars, limits);
}

}  // namespace s4kv::tokenizer
