// tokenizer.json "post_processor": what encode(add_special_tokens=true) adds around the
// text's ids. TemplateProcessing's "single" template (Llama-3's BOS) is applied; ByteLevel
// only trims offsets, which S4 KV does not report, so it adds nothing; a Sequence of these
// is accepted. Other processors (Bert, Roberta) are refused at load time.
#pragma once

#include <cstdint>
#include <vector>

#include "common/json.h"
#include "common/status.h"

namespace s4kv::tokenizer {

class PostProcessor {
 public:
  static Result<PostProcessor> from_json(const Json& j);

  // Ids of the "single" template: those before the sequence and those after it.
  const std::vector<int32_t>& prefix() const { return prefix_; }
  const std::vector<int32_t>& suffix() const { return suffix_; }

 private:
  Status add_template(const Json& j, const std::string& where);

  std::vector<int32_t> prefix_;
  std::vector<int32_t> suffix_;
  bool has_template_ = false;
};

}  // namespace s4kv::tokenizer
