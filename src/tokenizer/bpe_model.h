// tokenizer.json "model" of type BPE, byte-level: the vocabulary, the merges (ranked pairs)
// and Hugging Face's merge algorithm (lowest rank first, leftmost on ties, stale queue
// entries dropped by new-id check), with ignore_merges (a word found whole in the vocabulary
// is one token, as Llama-3 sets). Vocabulary strings are converted from the byte-level
// alphabet to raw bytes at load, so words are the text's own bytes.
//
// Thread-safety: immutable after load except the word cache, which is sharded and locked;
// encode_word may be called from many threads at once.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/json.h"
#include "common/status.h"

namespace s4kv::tokenizer {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// Reusable buffers for merging one word.
struct BpeScratch {
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    int32_t len;  // bytes; 0 once merged into its left neighbour
  };
  struct Merge {
    int32_t rank;
    int32_t pos;
    int32_t new_id;
  };
  std::vector<Symbol> symbols;
  std::vector<Merge> queue;
  std::vector<int32_t> ids;
};

class BpeModel {
 public:
  static Result<BpeModel> from_json(const Json& model);

  // Appends the ids of one pre-tokenized word (raw bytes).
  void encode_word(std::string_view word, std::vector<int32_t>& out, BpeScratch& scratch) const;

  // Vocabulary entries as written in tokenizer.json (byte-level alphabet), by id; empty for
  // ids the vocabulary does not use.
  const std::vector<std::string>& id_to_token() const { return id_to_token_; }
  const StringIdMap& token_to_id() const { return token_to_id_; }

 private:
  struct MergeTable;  // open-addressing map (left id, right id) -> (rank, new id)
  struct WordCache;

  Status load_vocab(const Json& vocab);
  Status load_merges(const Json& merges);
  void merge(std::string_view word, BpeScratch& s) const;

  std::vector<std::string> id_to_token_;
  StringIdMap token_to_id_;
  StringIdMap bytes_to_id_;             // raw bytes -> id, for ignore_merges
  std::array<int32_t, 256> byte_id_{};  // the single-byte token of each byte, -1 if none
  std::shared_ptr<const MergeTable> merges_;
  std::shared_ptr<WordCache> cache_;
  bool ignore_merges_ = false;
};

}  // namespace s4kv::tokenizer
