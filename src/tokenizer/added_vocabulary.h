// tokenizer.json "added_tokens": tokens matched in the text before the BPE model runs
// (special tokens such as "<|im_start|>" and plain added tokens), with Hugging Face's
// options: single_word, lstrip, rstrip, normalized, special. Tokens with normalized=false
// are matched on the raw text, the others on the normalized text. Matching is
// leftmost-longest and non-overlapping, as Hugging Face's Aho-Corasick matcher does.
// Immutable after load; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"
#include "common/status.h"
#include "tokenizer/normalizer.h"

namespace s4kv::tokenizer {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  bool special = false;
};

// A piece of text after added-token extraction: either an added token's id or plain text.
struct Segment {
  std::string_view text;
  int32_t id = -1;  // >= 0: an added token
};

class AddedVocabulary {
 public:
  static Result<AddedVocabulary> from_json(const Json& j, const Normalizer& normalizer);

  const std::vector<AddedToken>& tokens() const { return tokens_; }

  // Splits text at the added tokens matched on raw text (normalized == false) or on
  // normalized text (normalized == true). Appends to out; empty text pieces are dropped.
  void split(std::string_view text, bool normalized_set, std::vector<Segment>& out) const;

 private:
  // A byte trie over token contents; node 0 is the root.
  struct Trie {
    struct Node {
      std::vector<std::pair<unsigned char, int32_t>> children;  // sorted by byte
      int32_t token = -1;                                       // index into tokens_
    };
    std::vector<Node> nodes{Node{}};
    bool first_byte[256] = {};

    void insert(std::string_view key, int32_t token);
    // The longest token starting at text[pos], as {token index, length}; token -1 if none.
    std::pair<int32_t, size_t> longest(std::string_view text, size_t pos) const;
  };

  bool accept(const AddedToken& t, std::string_view text, size_t start, size_t stop) const;

  std::vector<AddedToken> tokens_;
  Trie raw_;
  Trie normalized_;
};

}  // namespace s4kv::tokenizer
