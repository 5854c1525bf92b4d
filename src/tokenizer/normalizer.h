// tokenizer.json "normalizer": none, or Unicode normalization (NFC for Qwen; NFD, NFKC,
// NFKD and a Sequence of these are accepted too), computed with utf8proc. Other normalizer
// types are refused at load time. Immutable; safe to share between threads.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"
#include "common/status.h"

namespace s4kv::tokenizer {

class Normalizer {
 public:
  // From the "normalizer" value (null means none).
  static Result<Normalizer> from_json(const Json& j);

  bool empty() const { return forms_.empty(); }

  // Normalizes text (valid UTF-8). Returns text itself when nothing changes, otherwise a
  // view of buf, which receives the normalized text.
  std::string_view apply(std::string_view text, std::string& buf) const;

 private:
  std::vector<int> forms_;  // utf8proc option sets, applied in order
  bool nfc_only_ = false;
};

}  // namespace s4kv::tokenizer
