// A compiled PCRE2 pattern (UTF, UCP, JIT-compiled when the platform allows) for the
// pre-tokenizer's Split steps. Immutable after compile and safe to share between threads:
// each search uses its own match data. Callers pass valid UTF-8 (checked once per encode),
// so matching skips PCRE2's own UTF check.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace s4kv::tokenizer {

class Regex {
 public:
  // `literal` compiles the text as a fixed string (Split's {"String": ...} patterns).
  static Result<Regex> compile(std::string_view pattern, bool literal = false);

  // Appends the [start, end) byte ranges of all non-overlapping matches, left to right. An
  // empty match advances the search by one character. Fails only when the matcher runs out
  // of its resource limits (pathological input).
  Status find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Code;
  std::shared_ptr<const Code> code_;
  std::string pattern_;
  bool jit_ = false;
};

}  // namespace s4kv::tokenizer
