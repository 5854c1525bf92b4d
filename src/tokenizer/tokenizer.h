// Tokenizer: byte-level BPE loaded from a Hugging Face tokenizer.json (Qwen2/2.5/3,
// Llama-3, GPT-2 style), with Hugging Face's encode and decode semantics:
//
//   encode: added tokens are matched first (special-token text inside ordinary text becomes
//   the special token, as in Hugging Face by default), then NFC (if configured), the
//   pre-tokenizer's regex split, and BPE on each word; add_special_tokens applies the
//   post-processor's template (Llama-3's BOS).
//   decode: each id's bytes are concatenated and read as UTF-8, ill-formed parts becoming
//   U+FFFD; unknown ids are skipped, special tokens too with skip_special_tokens.
//
// Anything outside this family is refused by from_file/from_json with a Status naming the
// field and value. A loaded Tokenizer is immutable (apart from an internal, locked cache)
// and may be used from many threads at once.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"
#include "common/status.h"
#include "tokenizer/added_vocabulary.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizer.h"

namespace s4kv::tokenizer {

class Tokenizer {
 public:
  // Reads tokenizer.json (at most 256 MiB).
  static Result<Tokenizer> from_file(const std::string& path);
  static Result<Tokenizer> from_json(const Json& j);

  // Token ids of text. Fails only when text is not valid UTF-8 (or, for pathological
  // input, when the regex engine exhausts its limits).
  Result<std::vector<int32_t>> encode(std::string_view text, bool add_special_tokens) const;

  // Text of ids. Never fails: unknown ids are skipped, as Hugging Face skips them.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const;

  // One more than the largest id (vocabulary and added tokens).
  int32_t vocab_size() const { return static_cast<int32_t>(tokens_.size()); }

  // The token string as written in tokenizer.json (byte-level alphabet for vocabulary
  // entries, content for added tokens); nullopt for an unknown id.
  std::optional<std::string_view> id_to_token(int32_t id) const;
  std::optional<int32_t> token_to_id(std::string_view token) const;
  bool is_special(int32_t id) const { return known(id) && tokens_[id].special; }
  const std::vector<AddedToken>& added_tokens() const { return added_.tokens(); }

  // The raw bytes id decodes to, or nullptr when decode skips it (unknown id, or a special
  // token with skip_special_tokens). Used by IncrementalDetokenizer.
  const std::string* token_bytes(int32_t id, bool skip_special_tokens) const;

 private:
  struct TokenInfo {
    std::string text;   // as in tokenizer.json
    std::string bytes;  // what the ByteLevel decoder makes of it
    bool known = false;
    bool special = false;
  };

  bool known(int32_t id) const { return id >= 0 && id < vocab_size() && tokens_[id].known; }
  Status build_token_table();

  Normalizer normalizer_;
  AddedVocabulary added_;
  PreTokenizer pre_tokenizer_;
  BpeModel model_;
  PostProcessor post_processor_;
  std::vector<TokenInfo> tokens_;  // by id
};

// Turns a stream of ids into text pieces for streaming responses. Each call to add returns
// the text that became final with that id: never a partial UTF-8 sequence, and the
// concatenation of every piece plus finish() equals Tokenizer::decode of all ids. One per
// sequence; not thread-safe; the Tokenizer must outlive it.
class IncrementalDetokenizer {
 public:
  IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens)
      : tokenizer_(&tokenizer), skip_special_tokens_(skip_special_tokens) {}

  // Appends the newly final text to out.
  void add(int32_t id, std::string& out);
  std::string add(int32_t id) {
    std::string out;
    add(id, out);
    return out;
  }
  // Flushes a trailing incomplete sequence (as U+FFFD, as decode does at the end).
  std::string finish();
  // True when bytes are held back waiting for the rest of a character.
  bool has_pending() const { return !pending_.empty(); }

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  std::string pending_;
};

}  // namespace s4kv::tokenizer
