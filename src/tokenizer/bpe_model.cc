#include "tokenizer/bpe_model.h"

#include <algorithm>

#include "tokenizer/byte_level.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/utf8.h"

namespace s4kv::tokenizer {
namespace {

// Ids above this are refused: a vocabulary this sparse is a broken file, and the id table
// is sized by the largest id.
constexpr int32_t kMaxTokenId = (1 << 24) - 1;
// Words longer than this are merged every time rather than cached (bounds cache memory).
constexpr size_t kMaxCachedWordBytes = 128;
constexpr size_t kCacheShards = 64;
constexpr size_t kMaxEntriesPerShard = 4096;

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

uint64_t mix(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  return k;
}

// Accepts the model options S4 KV implements; anything else is refused by name.
Status check_model_options(const Json& m) {
  S4KV_ASSIGN_OR_RETURN(std::string type, json_string(m, "type", "BPE", "model"));
  if (type != "BPE") {
    return unsupported("unsupported tokenizer.json model.type \"" + type + "\" (supported: BPE)");
  }
  if (m.contains("dropout") && !m["dropout"].is_null() &&
      !(m["dropout"].is_number() && m["dropout"].get<double>() == 0.0)) {
    return unsupported("unsupported tokenizer.json model.dropout " + json_brief(m["dropout"]) +
                       " (supported: null or 0)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    S4KV_ASSIGN_OR_RETURN(std::string v, json_string(m, key, "", "model"));
    if (!v.empty()) {
      return unsupported("unsupported tokenizer.json model." + std::string(key) + " \"" + v +
                         "\" (supported: null or empty for byte-level BPE)");
    }
  }
  S4KV_ASSIGN_OR_RETURN(bool byte_fallback, json_bool(m, "byte_fallback", false, "model"));
  if (byte_fallback) {
    return unsupported("unsupported tokenizer.json model.byte_fallback true (supported: false)");
  }
  return Status::ok();
}

}  // namespace

struct BpeModel::MergeTable {
  struct Slot {
    uint64_t key = ~uint64_t{0};
    int32_t rank = 0;
    int32_t new_id = 0;
  };
  std::vector<Slot> slots;
  uint64_t mask = 0;

  explicit MergeTable(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    slots.resize(cap);
    mask = cap - 1;
  }
  // A later duplicate overwrites an earlier one, as Hugging Face's HashMap collect does.
  void insert(uint64_t key, int32_t rank, int32_t new_id) {
    for (uint64_t i = mix(key) & mask;; i = (i + 1) & mask) {
      if (slots[i].key == key || slots[i].key == ~uint64_t{0}) {
        slots[i] = {key, rank, new_id};
        return;
      }
    }
  }
  const Slot* find(uint64_t key) const {
    for (uint64_t i = mix(key) & mask;; i = (i + 1) & mask) {
      if (slots[i].key == key) return &slots[i];
      if (slots[i].key == ~uint64_t{0}) return nullptr;
    }
  }
};

struct BpeModel::WordCache {
  struct Shard {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> map;
  };
  std::array<Shard, kCacheShards> shards;

  Shard& shard(std::string_view word) { return shards[StringHash{}(word) % kCacheShards]; }
};

Result<BpeModel> BpeModel::from_json(const Json& m) {
  S4KV_RETURN_IF_ERROR(check_model_options(m));
  BpeModel model;
  S4KV_ASSIGN_OR_RETURN(model.ignore_merges_, json_bool(m, "ignore_merges", false, "model"));
  S4KV_ASSIGN_OR_RETURN(const Json* vocab, json_member(m, "vocab", "model"));
  S4KV_RETURN_IF_ERROR(model.load_vocab(*vocab));
  S4KV_ASSIGN_OR_RETURN(const Json* merges, json_member(m, "merges", "model"));
  S4KV_RETURN_IF_ERROR(model.load_merges(*merges));
  // An unk token is never used when every byte has a token; otherwise it would change ids.
  S4KV_ASSIGN_OR_RETURN(std::string unk, json_string(m, "unk_token", "", "model"));
  const bool all_bytes =
      std::all_of(model.byte_id_.begin(), model.byte_id_.end(), [](int32_t id) { return id >= 0; });
  if (!unk.empty() && !all_bytes) {
    return unsupported("unsupported tokenizer.json model.unk_token \"" + unk +
                       "\" with a vocabulary missing some of the 256 byte tokens");
  }
  model.cache_ = std::make_shared<WordCache>();
  return model;
}

Status BpeModel::load_vocab(const Json& vocab) {
  if (!vocab.is_object()) {
    return invalid_argument("tokenizer.json field model.vocab must be an object, got " +
                            std::string(json_type_name(vocab)));
  }
  token_to_id_.reserve(vocab.size());
  bytes_to_id_.reserve(vocab.size());
  for (const auto& [token, value] : vocab.items()) {
    S4KV_ASSIGN_OR_RETURN(int32_t id, json_id(value, "model.vocab[\"" + token + "\"]"));
    if (id > kMaxTokenId) {
      return invalid_argument("tokenizer.json model.vocab[\"" + token + "\"] has id " +
                              std::to_string(id) + ", above the supported maximum " +
                              std::to_string(kMaxTokenId));
    }
    if (static_cast<size_t>(id) >= id_to_token_.size()) id_to_token_.resize(id + 1);
    if (!id_to_token_[id].empty() || token.empty()) {
      return invalid_argument("tokenizer.json model.vocab: " +
                              std::string(token.empty() ? "empty token" : "duplicate id") +
                              " at id " + std::to_string(id));
    }
    id_to_token_[id] = token;
    token_to_id_.emplace(token, id);
    if (auto bytes = byte_level_to_bytes(token)) bytes_to_id_.emplace(std::move(*bytes), id);
  }
  for (int b = 0; b < 256; ++b) {
    std::string s;
    append_utf8(byte_to_code_point(static_cast<unsigned char>(b)), s);
    auto it = token_to_id_.find(s);
    byte_id_[b] = it == token_to_id_.end() ? -1 : it->second;
  }
  return Status::ok();
}

Status BpeModel::load_merges(const Json& merges) {
  if (!merges.is_array()) {
    return invalid_argument("tokenizer.json field model.merges must be an array, got " +
                            std::string(json_type_name(merges)));
  }
  auto table = std::make_shared<MergeTable>(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const Json& m = merges[rank];
    const std::string where = "tokenizer.json model.merges[" + std::to_string(rank) + "]";
    std::string a, b;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
        return invalid_argument(where + " must be two tokens separated by one space, got " +
                                json_brief(m));
      }
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      return invalid_argument(where + " must be \"a b\" or [\"a\", \"b\"], got " + json_brief(m));
    }
    auto ia = token_to_id_.find(a);
    auto ib = token_to_id_.find(b);
    auto inew = token_to_id_.find(a + b);
    for (const auto& [it, tok] : {std::pair{ia, a}, {ib, b}, {inew, a + b}}) {
      if (it == token_to_id_.end()) {
        return invalid_argument(where + " " + json_brief(m) + ": token \"" + tok +
                                "\" is not in model.vocab");
      }
    }
    table->insert(pair_key(ia->second, ib->second), static_cast<int32_t>(rank), inew->second);
  }
  merges_ = std::move(table);
  return Status::ok();
}

void BpeModel::merge(std::string_view word, BpeScratch& s) const {
  auto& sym = s.symbols;
  auto& queue = s.queue;
  sym.clear();
  queue.clear();
  for (unsigned char c : word) {
    const int32_t id = byte_id_[c];
    if (id < 0) continue;  // no token for this byte and no unk: dropped, as Hugging Face does
    const auto n = static_cast<int32_t>(sym.size());
    if (n > 0) sym.back().next = n;
    sym.push_back({id, n - 1, -1, 1});
  }
  // Min-heap on (rank, pos).
  auto later = [](const BpeScratch::Merge& x, const BpeScratch::Merge& y) {
    return x.rank != y.rank ? x.rank > y.rank : x.pos > y.pos;
  };
  auto push = [&](int32_t pos, int32_t left, int32_t right) {
    if (const MergeTable::Slot* m = merges_->find(pair_key(left, right))) {
      queue.push_back({m->rank, pos, m->new_id});
      std::push_heap(queue.begin(), queue.end(), later);
    }
  };
  for (size_t i = 0; i + 1 < sym.size(); ++i) {
    push(static_cast<int32_t>(i), sym[i].id, sym[i + 1].id);
  }
  while (!queue.empty()) {
    std::pop_heap(queue.begin(), queue.end(), later);
    const BpeScratch::Merge top = queue.back();
    queue.pop_back();
    BpeScratch::Symbol& cur = sym[top.pos];
    if (cur.len == 0 || cur.next == -1) continue;
    const int32_t next_pos = cur.next;
    const BpeScratch::Symbol right = sym[next_pos];
    const MergeTable::Slot* m = merges_->find(pair_key(cur.id, right.id));
    if (m == nullptr || m->new_id != top.new_id) continue;  // stale entry
    cur.id = top.new_id;
    cur.len += right.len;
    cur.next = right.next;
    sym[next_pos].len = 0;
    if (right.next >= 0) sym[right.next].prev = top.pos;
    if (cur.prev >= 0) push(cur.prev, sym[cur.prev].id, cur.id);
    if (cur.next >= 0) push(top.pos, cur.id, sym[cur.next].id);
  }
  s.ids.clear();
  for (const auto& x : sym) {
    if (x.len != 0) s.ids.push_back(x.id);
  }
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out,
                           BpeScratch& scratch) const {
  if (word.size() == 1) {
    const int32_t id = byte_id_[static_cast<unsigned char>(word[0])];
    if (id >= 0) out.push_back(id);
    return;
  }
  if (ignore_merges_) {
    if (auto it = bytes_to_id_.find(word); it != bytes_to_id_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  const bool cacheable = word.size() <= kMaxCachedWordBytes;
  if (cacheable) {
    WordCache::Shard& shard = cache_->shard(word);
    std::lock_guard<std::mutex> lock(shard.mu);
    if (auto it = shard.map.find(word); it != shard.map.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  merge(word, scratch);
  out.insert(out.end(), scratch.ids.begin(), scratch.ids.end());
  if (cacheable) {
    WordCache::Shard& shard = cache_->shard(word);
    std::lock_guard<std::mutex> lock(shard.mu);
    if (shard.map.size() >= kMaxEntriesPerShard) shard.map.clear();
    shard.map.emplace(std::string(word), scratch.ids);
  }
}

}  // namespace s4kv::tokenizer
