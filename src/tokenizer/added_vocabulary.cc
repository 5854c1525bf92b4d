#include "tokenizer/added_vocabulary.h"

#include <algorithm>

#include "tokenizer/json_fields.h"
#include "tokenizer/utf8.h"

namespace s4kv::tokenizer {
namespace {

// Hugging Face's `\s*$` start: where the run of whitespace ending the text begins.
size_t trailing_space_start(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = 0;
    if (!is_unicode_whitespace(prev_code_point(s, end, start))) break;
    end = start;
  }
  return end;
}

// Hugging Face's `^\s*` end: the length of the run of whitespace starting the text.
size_t leading_space_len(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t j = i;
    if (!is_unicode_whitespace(next_code_point(s, j))) break;
    i = j;
  }
  return i;
}

Result<AddedToken> parse_token(const Json& j, const std::string& where) {
  AddedToken t;
  S4KV_ASSIGN_OR_RETURN(const Json* id, json_member(j, "id", where));
  S4KV_ASSIGN_OR_RETURN(t.id, json_id(*id, where + ".id"));
  S4KV_ASSIGN_OR_RETURN(t.content, json_required_string(j, "content", where));
  S4KV_ASSIGN_OR_RETURN(t.single_word, json_bool(j, "single_word", false, where));
  S4KV_ASSIGN_OR_RETURN(t.lstrip, json_bool(j, "lstrip", false, where));
  S4KV_ASSIGN_OR_RETURN(t.rstrip, json_bool(j, "rstrip", false, where));
  S4KV_ASSIGN_OR_RETURN(t.normalized, json_bool(j, "normalized", true, where));
  S4KV_ASSIGN_OR_RETURN(t.special, json_bool(j, "special", false, where));
  if (t.content.empty()) return invalid_argument("tokenizer.json " + where + ".content is empty");
  return t;
}

}  // namespace

void AddedVocabulary::Trie::insert(std::string_view key, int32_t token) {
  int32_t node = 0;
  first_byte[static_cast<unsigned char>(key[0])] = true;
  for (unsigned char c : key) {
    auto& ch = nodes[node].children;
    auto it = std::lower_bound(ch.begin(), ch.end(), std::pair<unsigned char, int32_t>{c, -1});
    if (it != ch.end() && it->first == c) {
      node = it->second;
      continue;
    }
    const auto next = static_cast<int32_t>(nodes.size());
    ch.insert(it, {c, next});
    nodes.emplace_back();
    node = next;
  }
  // The first token with a given content wins, as Aho-Corasick reports the first pattern.
  if (nodes[node].token < 0) nodes[node].token = token;
}

std::pair<int32_t, size_t> AddedVocabulary::Trie::longest(std::string_view text, size_t pos) const {
  std::pair<int32_t, size_t> best{-1, 0};
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto& ch = nodes[node].children;
    const auto c = static_cast<unsigned char>(text[i]);
    auto it = std::lower_bound(ch.begin(), ch.end(), std::pair<unsigned char, int32_t>{c, -1});
    if (it == ch.end() || it->first != c) break;
    node = it->second;
    if (nodes[node].token >= 0) best = {nodes[node].token, i + 1 - pos};
  }
  return best;
}

Result<AddedVocabulary> AddedVocabulary::from_json(const Json& j, const Normalizer& normalizer) {
  AddedVocabulary v;
  if (j.is_null()) return v;
  if (!j.is_array()) {
    return invalid_argument("tokenizer.json field added_tokens must be an array, got " +
                            std::string(json_type_name(j)));
  }
  for (size_t i = 0; i < j.size(); ++i) {
    S4KV_ASSIGN_OR_RETURN(AddedToken t,
                          parse_token(j[i], "added_tokens[" + std::to_string(i) + "]"));
    v.tokens_.push_back(std::move(t));
  }
  // Hugging Face builds its matchers from the special tokens first, then the others.
  std::vector<int32_t> order(v.tokens_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::stable_partition(order.begin(), order.end(),
                        [&](int32_t i) { return v.tokens_[i].special; });
  for (int32_t i : order) {
    const AddedToken& t = v.tokens_[i];
    if (!t.normalized) {
      v.raw_.insert(t.content, i);
      continue;
    }
    std::string buf;
    const std::string_view key = normalizer.apply(t.content, buf);
    if (!key.empty()) v.normalized_.insert(key, i);
  }
  return v;
}

bool AddedVocabulary::accept(const AddedToken& t, std::string_view text, size_t start,
                             size_t stop) const {
  if (!t.single_word) return true;
  size_t unused = 0;
  const bool word_before = start > 0 && is_word_char(prev_code_point(text, start, unused));
  size_t i = stop;
  const bool word_after = stop < text.size() && is_word_char(next_code_point(text, i));
  return !word_before && !word_after;
}

void AddedVocabulary::split(std::string_view text, bool normalized_set,
                            std::vector<Segment>& out) const {
  const Trie& trie = normalized_set ? normalized_ : raw_;
  size_t done = 0;  // end of the previous match
  size_t pos = 0;   // where the matcher resumes
  while (trie.nodes[0].children.size() > 0 && pos < text.size()) {
    if (!trie.first_byte[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      continue;
    }
    const auto [index, len] = trie.longest(text, pos);
    if (index < 0) {
      ++pos;
      continue;
    }
    size_t start = pos;
    size_t stop = pos + len;
    pos = stop;  // non-overlapping: the matcher resumes after this match either way
    const AddedToken& t = tokens_[index];
    if (start < done || !accept(t, text, start, stop)) continue;
    if (t.lstrip) start = std::max(trailing_space_start(text.substr(0, start)), done);
    if (t.rstrip) stop += leading_space_len(text.substr(stop));
    if (start > done) out.push_back({text.substr(done, start - done), -1});
    out.push_back({text.substr(start, stop - start), t.id});
    done = stop;
  }
  if (done < text.size()) out.push_back({text.substr(done), -1});
}

}  // namespace s4kv::tokenizer
