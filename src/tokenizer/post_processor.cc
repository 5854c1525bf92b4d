#include "tokenizer/post_processor.h"

#include "tokenizer/json_fields.h"

namespace s4kv::tokenizer {

Result<PostProcessor> PostProcessor::from_json(const Json& j) {
  PostProcessor p;
  if (j.is_null()) return p;
  std::vector<std::pair<const Json*, std::string>> items;
  S4KV_ASSIGN_OR_RETURN(std::string type, json_required_string(j, "type", "post_processor"));
  if (type == "Sequence") {
    S4KV_ASSIGN_OR_RETURN(const Json* list, json_member(j, "processors", "post_processor"));
    if (!list->is_array()) {
      return invalid_argument("tokenizer.json post_processor.processors must be an array");
    }
    for (size_t i = 0; i < list->size(); ++i) {
      items.emplace_back(&(*list)[i], "post_processor.processors[" + std::to_string(i) + "]");
    }
  } else {
    items.emplace_back(&j, "post_processor");
  }
  for (const auto& [item, where] : items) {
    S4KV_ASSIGN_OR_RETURN(std::string t, json_required_string(*item, "type", where));
    if (t == "ByteLevel") continue;
    if (t != "TemplateProcessing") {
      return unsupported("unsupported tokenizer.json " + where + " type \"" + t +
                         "\" (supported: ByteLevel, TemplateProcessing, Sequence of these)");
    }
    S4KV_RETURN_IF_ERROR(p.add_template(*item, where));
  }
  return p;
}

Status PostProcessor::add_template(const Json& j, const std::string& where) {
  if (has_template_) {
    return unsupported("tokenizer.json " + where + ": more than one TemplateProcessing");
  }
  has_template_ = true;
  S4KV_ASSIGN_OR_RETURN(const Json* single, json_member(j, "single", where));
  S4KV_ASSIGN_OR_RETURN(const Json* specials, json_member(j, "special_tokens", where));
  if (!single->is_array() || !specials->is_object()) {
    return invalid_argument("tokenizer.json " + where +
                            ": single must be an array and special_tokens an object");
  }
  bool seen_sequence = false;
  for (size_t i = 0; i < single->size(); ++i) {
    const Json& piece = (*single)[i];
    const std::string pwhere = where + ".single[" + std::to_string(i) + "]";
    if (piece.is_object() && piece.contains("Sequence")) {
      S4KV_ASSIGN_OR_RETURN(std::string id, json_required_string(piece["Sequence"], "id", pwhere));
      if (id != "A" || seen_sequence) {
        return invalid_argument("tokenizer.json " + pwhere +
                                ": the single template takes "
                                "sequence A once, got " +
                                json_brief(piece));
      }
      seen_sequence = true;
      continue;
    }
    if (!piece.is_object() || !piece.contains("SpecialToken")) {
      return invalid_argument("tokenizer.json " + pwhere +
                              " must be {\"Sequence\": ..} or {\"SpecialToken\": ..}, got " +
                              json_brief(piece));
    }
    S4KV_ASSIGN_OR_RETURN(std::string name,
                          json_required_string(piece["SpecialToken"], "id", pwhere));
    S4KV_ASSIGN_OR_RETURN(const Json* special,
                          json_member(*specials, name, where + ".special_tokens"));
    S4KV_ASSIGN_OR_RETURN(const Json* ids,
                          json_member(*special, "ids", where + ".special_tokens." + name));
    if (!ids->is_array()) {
      return invalid_argument("tokenizer.json " + where + ".special_tokens." + name +
                              ".ids must be an array");
    }
    for (const Json& id : *ids) {
      S4KV_ASSIGN_OR_RETURN(int32_t v, json_id(id, where + ".special_tokens." + name + ".ids"));
      (seen_sequence ? suffix_ : prefix_).push_back(v);
    }
  }
  if (!seen_sequence) {
    return invalid_argument("tokenizer.json " + where + ".single has no Sequence A");
  }
  return Status::ok();
}

}  // namespace s4kv::tokenizer
