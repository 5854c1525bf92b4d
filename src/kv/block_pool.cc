// BlockPool (see block_pool.h): an intrusive doubly linked free list over a block array, so
// allocate, free and touch are O(1) per block with no allocation beyond the returned ids.
#include "kv/block_pool.h"

#include "common/check.h"

namespace s4kv::kv {

BlockPool::BlockPool(int num_blocks, bool enable_prefix_caching, int last_resort_from)
    : last_resort_from_(last_resort_from < 0 ? num_blocks : last_resort_from),
      enable_prefix_caching_(enable_prefix_caching) {
  S4KV_CHECK(num_blocks >= 1 && last_resort_from_ <= num_blocks, "num_blocks=", num_blocks,
             " last_resort_from=", last_resort_from);
  blocks_.resize(static_cast<size_t>(num_blocks));
  for (BlockId b = 0; b < num_blocks; ++b) push_back_free(b);
}

BlockPool::Block& BlockPool::at(BlockId block) {
  S4KV_CHECK(block >= 0 && block < num_blocks(), "block id ", block, " out of range");
  return blocks_[static_cast<size_t>(block)];
}

const BlockPool::Block& BlockPool::at(BlockId block) const {
  S4KV_CHECK(block >= 0 && block < num_blocks(), "block id ", block, " out of range");
  return blocks_[static_cast<size_t>(block)];
}

std::optional<std::vector<BlockId>> BlockPool::allocate(int n) {
  S4KV_CHECK(n >= 0, "allocate(", n, ")");
  if (n > num_free_) return std::nullopt;
  std::vector<BlockId> out;
  out.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const BlockId b = head_[0] != kNone ? head_[0] : head_[1];
    unlink_free(b);
    evict_hash(b);  // its old contents are about to be overwritten
    at(b).ref_count = 1;
    out.push_back(b);
  }
  return out;
}

bool BlockPool::take(std::span<const BlockId> blocks) {
  for (BlockId b : blocks) {
    if (at(b).ref_count != 0) return false;
  }
  for (BlockId b : blocks) {
    unlink_free(b);  // S4KV_CHECKs a block listed twice
    evict_hash(b);
    at(b).ref_count = 1;
  }
  return true;
}

bool BlockPool::uncache(BlockId block) {
  const Block& b = at(block);
  if (b.ref_count != 0 || !b.hash.has_value()) return false;
  evict_hash(block);
  return true;
}

void BlockPool::free(std::span<const BlockId> blocks) {
  for (BlockId b : blocks) {
    Block& block = at(b);
    S4KV_CHECK(block.ref_count > 0, "double free of block ", b);
    if (--block.ref_count == 0) push_back_free(b);
  }
}

void BlockPool::touch(std::span<const BlockId> blocks) {
  for (BlockId b : blocks) {
    Block& block = at(b);
    if (block.ref_count == 0) unlink_free(b);
    ++block.ref_count;
  }
}

std::optional<BlockId> BlockPool::lookup(BlockHash hash) const {
  const auto it = cached_blocks_.find(hash);
  if (it == cached_blocks_.end()) return std::nullopt;
  return it->second;
}

bool BlockPool::cache_full_block(BlockId block, BlockHash hash) {
  Block& b = at(block);
  S4KV_CHECK(b.ref_count > 0, "caching free block ", block);
  S4KV_CHECK(!b.hash.has_value(), "block ", block, " is already cached");
  if (!enable_prefix_caching_) return false;
  if (!cached_blocks_.emplace(hash, block).second) return false;
  b.hash = hash;
  return true;
}

double BlockPool::usage() const {
  return 1.0 - static_cast<double>(num_free_) / static_cast<double>(num_blocks());
}

void BlockPool::record_prefix_cache_query(int64_t num_queried_tokens, int64_t num_hit_tokens) {
  S4KV_CHECK(num_hit_tokens >= 0 && num_hit_tokens <= num_queried_tokens, "hits ", num_hit_tokens,
             " of ", num_queried_tokens);
  prefix_cache_queries_ += num_queried_tokens;
  prefix_cache_hits_ += num_hit_tokens;
}

int BlockPool::ref_count(BlockId block) const { return at(block).ref_count; }

std::optional<BlockHash> BlockPool::block_hash(BlockId block) const { return at(block).hash; }

std::vector<BlockId> BlockPool::free_list() const {
  std::vector<BlockId> out;
  out.reserve(static_cast<size_t>(num_free_));
  for (int list = 0; list < 2; ++list) {
    for (BlockId b = head_[list]; b != kNone; b = at(b).next) out.push_back(b);
  }
  return out;
}

void BlockPool::push_back_free(BlockId block) {
  Block& b = at(block);
  S4KV_CHECK(!b.in_free_list, "block ", block, " already free");
  const int list = list_of(block);
  b.prev = tail_[list];
  b.next = kNone;
  if (tail_[list] == kNone) {
    head_[list] = block;
  } else {
    at(tail_[list]).next = block;
  }
  tail_[list] = block;
  b.in_free_list = true;
  ++num_free_in_[list];
  ++num_free_;
  if (b.hash.has_value()) ++num_free_cached_;
}

void BlockPool::unlink_free(BlockId block) {
  Block& b = at(block);
  S4KV_CHECK(b.in_free_list, "block ", block, " is not free");
  const int list = list_of(block);
  if (b.prev == kNone) {
    head_[list] = b.next;
  } else {
    at(b.prev).next = b.next;
  }
  if (b.next == kNone) {
    tail_[list] = b.prev;
  } else {
    at(b.next).prev = b.prev;
  }
  b.prev = b.next = kNone;
  b.in_free_list = false;
  --num_free_in_[list];
  --num_free_;
  if (b.hash.has_value()) --num_free_cached_;
}

void BlockPool::evict_hash(BlockId block) {
  Block& b = at(block);
  if (!b.hash.has_value()) return;
  const size_t erased = cached_blocks_.erase(*b.hash);
  S4KV_CHECK(erased == 1, "block ", block, " had a hash missing from the map");
  b.hash.reset();
  if (b.in_free_list) --num_free_cached_;
}

void BlockPool::check_invariants() const {
  std::vector<char> seen(blocks_.size(), 0);
  check_free_list(0, seen);
  check_free_list(1, seen);
  S4KV_CHECK(num_free_in_[0] + num_free_in_[1] == num_free_, "free ", num_free_in_[0], " + ",
             num_free_in_[1], " != ", num_free_);
  int num_in_use = 0;
  int num_hashed = 0;
  int num_free_cached = 0;
  for (BlockId id = 0; id < num_blocks(); ++id) {
    const Block& b = at(id);
    S4KV_CHECK(b.ref_count >= 0, "block ", id, " ref_count ", b.ref_count);
    // Free exactly when unreferenced, and then reached by the list walk.
    S4KV_CHECK((b.ref_count == 0) == b.in_free_list, "block ", id, " ref_count ", b.ref_count,
               " in_free_list ", b.in_free_list);
    S4KV_CHECK(b.in_free_list == (seen[static_cast<size_t>(id)] != 0), "block ", id,
               " free flag disagrees with the free list");
    if (!b.in_free_list) {
      S4KV_CHECK(b.prev == kNone && b.next == kNone, "in-use block ", id, " has list links");
      ++num_in_use;
    }
    if (b.hash.has_value()) {
      ++num_hashed;
      if (b.in_free_list) ++num_free_cached;
      const auto it = cached_blocks_.find(*b.hash);
      S4KV_CHECK(it != cached_blocks_.end() && it->second == id, "block ", id,
                 " hash not mapped to it");
    }
  }
  S4KV_CHECK(num_in_use + num_free_ == num_blocks(), "in use ", num_in_use, " + free ", num_free_,
             " != ", num_blocks());
  S4KV_CHECK(static_cast<size_t>(num_hashed) == cached_blocks_.size(), "hashed blocks ", num_hashed,
             " != map size ", cached_blocks_.size());
  S4KV_CHECK(num_free_cached == num_free_cached_, "free cached blocks ", num_free_cached,
             " != the count ", num_free_cached_);
  check_hash_map();
}

// Walks a list head to tail: each step's back link must point at the previous node, no node
// may repeat (that would be a cycle), every node belongs to the list, and the length must
// equal its count.
void BlockPool::check_free_list(int list, std::vector<char>& seen) const {
  S4KV_CHECK((head_[list] == kNone) == (tail_[list] == kNone), "head ", head_[list], " tail ",
             tail_[list]);
  int count = 0;
  BlockId prev = kNone;
  for (BlockId b = head_[list]; b != kNone; b = at(b).next) {
    S4KV_CHECK(!seen[static_cast<size_t>(b)], "block ", b, " twice in the free lists");
    S4KV_CHECK(list_of(b) == list, "block ", b, " in free list ", list);
    seen[static_cast<size_t>(b)] = 1;
    S4KV_CHECK(at(b).prev == prev, "block ", b, " prev ", at(b).prev, " expected ", prev);
    prev = b;
    ++count;
  }
  S4KV_CHECK(prev == tail_[list], "list ends at ", prev, " but tail is ", tail_[list]);
  S4KV_CHECK(count == num_free_in_[list], "free list ", list, " length ", count,
             " != ", num_free_in_[list]);
}

void BlockPool::check_hash_map() const {
  S4KV_CHECK(enable_prefix_caching_ || cached_blocks_.empty(), "cached blocks without caching");
  for (const auto& [hash, id] : cached_blocks_) {
    const Block& b = at(id);
    S4KV_CHECK(b.hash.has_value() && *b.hash == hash, "map entry for block ", id,
               " names a hash the block does not carry");
  }
}

}  // namespace s4kv::kv
