#include "tokenizer/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>

namespace s4kv::tokenizer {
namespace {

Result<int> form_options(const Json& j) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return invalid_argument("tokenizer.json normalizer must be an object with a \"type\", got " +
                            json_brief(j));
  }
  const std::string type = j["type"].get<std::string>();
  const int base = UTF8PROC_STABLE;
  if (type == "NFC") return base | UTF8PROC_COMPOSE;
  if (type == "NFD") return base | UTF8PROC_DECOMPOSE;
  if (type == "NFKC") return base | UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
  if (type == "NFKD") return base | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
  return unsupported("unsupported tokenizer.json normalizer type \"" + type +
                     "\" (supported: NFC, NFD, NFKC, NFKD, Sequence of these, null)");
}

// ASCII is unchanged by every form. Under NFC, code points below U+0300 are unchanged
// too unless a combining mark (all at U+0300 or above) follows.
bool unchanged(std::string_view text, bool nfc_only) {
  const unsigned char limit = nfc_only ? 0xCC : 0x80;  // 0xCC: lead byte of U+0300..U+033F
  for (unsigned char c : text) {
    if (c >= limit) return false;
  }
  return true;
}

}  // namespace

Result<Normalizer> Normalizer::from_json(const Json& j) {
  Normalizer n;
  if (j.is_null()) return n;
  if (j.is_object() && j.contains("type") && j["type"] == "Sequence") {
    const Json* list = j.contains("normalizers") ? &j["normalizers"] : nullptr;
    if (list == nullptr || !list->is_array()) {
      return invalid_argument("tokenizer.json normalizer Sequence needs a \"normalizers\" array");
    }
    for (const Json& item : *list) {
      S4KV_ASSIGN_OR_RETURN(int form, form_options(item));
      n.forms_.push_back(form);
    }
  } else {
    S4KV_ASSIGN_OR_RETURN(int form, form_options(j));
    n.forms_.push_back(form);
  }
  n.nfc_only_ = true;
  for (int form : n.forms_) n.nfc_only_ &= form == (UTF8PROC_STABLE | UTF8PROC_COMPOSE);
  return n;
}

std::string_view Normalizer::apply(std::string_view text, std::string& buf) const {
  if (forms_.empty() || unchanged(text, nfc_only_)) return text;
  std::string_view cur = text;
  for (int form : forms_) {
    utf8proc_uint8_t* out = nullptr;
    const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(cur.data()),
                                            static_cast<utf8proc_ssize_t>(cur.size()), &out,
                                            static_cast<utf8proc_option_t>(form));
    // Input is valid UTF-8, so utf8proc fails only on allocation failure.
    S4KV_CHECK(n >= 0, "utf8proc_map failed: ", utf8proc_errmsg(n));
    buf.assign(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
    std::free(out);
    cur = buf;
  }
  return cur;
}

}  // namespace s4kv::tokenizer
