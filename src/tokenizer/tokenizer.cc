#include "tokenizer/tokenizer.h"

#include <exception>
#include <unordered_set>

#include "common/file.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/utf8.h"

namespace s4kv::tokenizer {
namespace {

constexpr size_t kMaxTokenizerJsonBytes = size_t{256} << 20;

// Per-thread buffers reused across encode calls: no allocation per word in steady state.
struct EncodeScratch {
  std::vector<Segment> raw;
  std::vector<Segment> normalized;
  std::string normalized_text;
  PreTokenizeScratch pre;
  BpeScratch bpe;
};

Status check_decoder(const Json& root) {
  const Json* d = root.contains("decoder") ? &root["decoder"] : nullptr;
  if (d == nullptr || d->is_null()) {
    return unsupported(
        "tokenizer.json decoder is null; S4 KV serves byte-level BPE only "
        "(decoder ByteLevel)");
  }
  S4KV_ASSIGN_OR_RETURN(std::string type, json_required_string(*d, "type", "decoder"));
  if (type != "ByteLevel") {
    return unsupported("unsupported tokenizer.json decoder type \"" + type +
                       "\" (supported: ByteLevel)");
  }
  return Status::ok();
}

const Json& member_or_null(const Json& j, const char* key) {
  static const Json kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

}  // namespace

Result<Tokenizer> Tokenizer::from_file(const std::string& path) {
  S4KV_ASSIGN_OR_RETURN(Json j, read_json_file(path, kMaxTokenizerJsonBytes));
  auto t = from_json(j);
  if (!t.is_ok()) return Status(t.status().code(), path + ": " + t.status().message());
  return t;
}

Result<Tokenizer> Tokenizer::from_json(const Json& j) {
  if (!j.is_object()) {
    return invalid_argument("tokenizer.json must be a JSON object, got " +
                            std::string(json_type_name(j)));
  }
  try {
    Tokenizer t;
    S4KV_ASSIGN_OR_RETURN(const Json* model, json_member(j, "model", ""));
    S4KV_ASSIGN_OR_RETURN(t.model_, BpeModel::from_json(*model));
    S4KV_ASSIGN_OR_RETURN(t.normalizer_, Normalizer::from_json(member_or_null(j, "normalizer")));
    S4KV_ASSIGN_OR_RETURN(t.pre_tokenizer_,
                          PreTokenizer::from_json(member_or_null(j, "pre_tokenizer")));
    S4KV_RETURN_IF_ERROR(check_decoder(j));
    S4KV_ASSIGN_OR_RETURN(
        t.added_, AddedVocabulary::from_json(member_or_null(j, "added_tokens"), t.normalizer_));
    S4KV_ASSIGN_OR_RETURN(t.post_processor_,
                          PostProcessor::from_json(member_or_null(j, "post_processor")));
    S4KV_RETURN_IF_ERROR(t.build_token_table());
    return t;
  } catch (const std::exception& e) {
    // The accessors above check types first; this is a last resort (allocation failure).
    return invalid_argument(std::string("tokenizer.json could not be loaded: ") + e.what());
  }
}

Status Tokenizer::build_token_table() {
  const auto& vocab = model_.id_to_token();
  size_t size = vocab.size();
  for (const AddedToken& t : added_.tokens()) size = std::max(size, static_cast<size_t>(t.id) + 1);
  tokens_.assign(size, TokenInfo{});
  for (size_t id = 0; id < vocab.size(); ++id) {
    if (vocab[id].empty()) continue;
    tokens_[id] = {vocab[id], byte_level_decode_token(vocab[id]), true, false};
  }
  // Added tokens take precedence over a vocabulary entry with the same id.
  std::unordered_set<std::string_view> special;
  for (const AddedToken& t : added_.tokens()) {
    tokens_[t.id] = {t.content, byte_level_decode_token(t.content), true, false};
    if (t.special) special.insert(t.content);
  }
  // Hugging Face skips by token string: any id whose string is a special token's content.
  for (TokenInfo& info : tokens_) info.special = info.known && special.contains(info.text);
  for (int32_t id : post_processor_.prefix()) {
    if (!known(id))
      return invalid_argument("tokenizer.json post_processor uses unknown id " +
                              std::to_string(id));
  }
  for (int32_t id : post_processor_.suffix()) {
    if (!known(id))
      return invalid_argument("tokenizer.json post_processor uses unknown id " +
                              std::to_string(id));
  }
  return Status::ok();
}

Result<std::vector<int32_t>> Tokenizer::encode(std::string_view text,
                                               bool add_special_tokens) const {
  if (const size_t bad = find_invalid_utf8(text); bad != std::string_view::npos) {
    return invalid_argument("text is not valid UTF-8 (byte offset " + std::to_string(bad) + ")");
  }
  thread_local EncodeScratch s;
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (add_special_tokens) ids = post_processor_.prefix();
  s.raw.clear();
  added_.split(text, /*normalized_set=*/false, s.raw);
  for (const Segment& seg : s.raw) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
      continue;
    }
    const std::string_view norm = normalizer_.apply(seg.text, s.normalized_text);
    s.normalized.clear();
    added_.split(norm, /*normalized_set=*/true, s.normalized);
    for (const Segment& sub : s.normalized) {
      if (sub.id >= 0) {
        ids.push_back(sub.id);
        continue;
      }
      S4KV_RETURN_IF_ERROR(pre_tokenizer_.split(sub.text, s.pre));
      for (std::string_view word : s.pre.pieces) model_.encode_word(word, ids, s.bpe);
    }
  }
  if (add_special_tokens) {
    ids.insert(ids.end(), post_processor_.suffix().begin(), post_processor_.suffix().end());
  }
  return ids;
}

const std::string* Tokenizer::token_bytes(int32_t id, bool skip_special_tokens) const {
  if (!known(id)) return nullptr;
  const TokenInfo& t = tokens_[id];
  if (skip_special_tokens && t.special) return nullptr;
  return &t.bytes;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string bytes;
  for (int32_t id : ids) {
    if (const std::string* b = token_bytes(id, skip_special_tokens)) bytes += *b;
  }
  std::string out;
  out.reserve(bytes.size());
  append_utf8_lossy(bytes, out, /*final=*/true);
  return out;
}

std::optional<std::string_view> Tokenizer::id_to_token(int32_t id) const {
  if (!known(id)) return std::nullopt;
  return tokens_[id].text;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  for (const AddedToken& t : added_.tokens()) {
    if (t.content == token) return t.id;
  }
  const auto& map = model_.token_to_id();
  if (auto it = map.find(token); it != map.end()) return it->second;
  return std::nullopt;
}

void IncrementalDetokenizer::add(int32_t id, std::string& out) {
  const std::string* b = tokenizer_->token_bytes(id, skip_special_tokens_);
  if (b == nullptr) return;
  pending_ += *b;
  const size_t consumed = append_utf8_lossy(pending_, out, /*final=*/false);
  pending_.erase(0, consumed);
}

std::string IncrementalDetokenizer::finish() {
  std::string out;
  append_utf8_lossy(pending_, out, /*final=*/true);
  pending_.clear();
  return out;
}

}  // namespace s4kv::tokenizer
