// tokenizer.json "pre_tokenizer" for the byte-level BPE family: a Split step (a regex or
// literal pattern with Hugging Face's five behaviors and `invert`), a ByteLevel step
// (add_prefix_space, use_regex with GPT-2's pattern), or a Sequence of these ending in
// ByteLevel. Because the byte-level mapping is implicit (S4 KV's BPE works on raw bytes),
// ByteLevel must come last; anything else is refused at load time. Immutable; thread-safe.
#pragma once

#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"
#include "common/status.h"
#include "tokenizer/regex.h"

namespace s4kv::tokenizer {

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Reusable buffers for one encode call.
struct PreTokenizeScratch {
  std::vector<std::string_view> pieces;
  std::vector<std::string_view> next;
  std::vector<std::pair<size_t, size_t>> matches;
  std::deque<std::string> prefixed;  // owns pieces that got a prefix space
};

class PreTokenizer {
 public:
  static Result<PreTokenizer> from_json(const Json& j);

  // Splits text into words for the BPE model; results in scratch.pieces (views of text or
  // of scratch.prefixed). Empty words are dropped, as Hugging Face drops them.
  Status split(std::string_view text, PreTokenizeScratch& scratch) const;

 private:
  struct Step {
    Regex regex;
    SplitBehavior behavior = SplitBehavior::kIsolated;
    bool invert = false;
    bool add_prefix_space = false;  // ByteLevel only
    bool is_byte_level = false;
    bool use_regex = true;  // ByteLevel only
  };

  static Result<Step> parse_split(const Json& j, std::string_view where);
  static Result<Step> parse_byte_level(const Json& j, std::string_view where);
  Status apply(const Step& step, std::string_view piece, PreTokenizeScratch& s) const;

  std::vector<Step> steps_;
};

}  // namespace s4kv::tokenizer
