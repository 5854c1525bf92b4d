// BlockPool: the KV cache's blocks as ids 0..num_blocks-1, each with a reference count and, once
// full and cached, a block hash (block_hash.h). It never sees KV bytes: the backend owns the
// memory, the pool decides which block ids are in use.
//
// Invariants (check_invariants() verifies all of them):
//   - a block is either in use (ref_count > 0) or in the free list exactly once (ref_count 0);
//   - the free list is in LRU order: freed blocks join at the tail, allocation takes the head;
//     blocks from `last_resort_from` on have a free list of their own, which allocation takes
//     from only when the first is empty (KvCacheManager keeps the seats' 16-bit rings there, so
//     requests leave those blocks free while they can);
//   - a free block may keep its hash and stay findable by lookup() (a prefix-cache hit revives it
//     with touch()) until allocate() hands it out again, which evicts the hash;
//   - the hash map is a bijection between cached hashes and the blocks carrying them;
//   - num_free_cached_blocks() counts the free blocks that carry a hash.
// This is vLLM v1's block pool design, written for this project.
//
// Thread ownership: engine thread only. Nothing here locks.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/block_hash.h"

namespace s4kv::kv {

using BlockId = int32_t;

class BlockPool {
 public:
  // num_blocks >= 1 and 0 <= last_resort_from <= num_blocks (S4KV_CHECK; -1: num_blocks, no
  // last-resort blocks). Without prefix caching, lookup() never hits and cache_full_block()
  // does nothing.
  BlockPool(int num_blocks, bool enable_prefix_caching, int last_resort_from = -1);

  // n blocks from the head of the free list (then of the last-resort list) with ref count 1, or
  // nullopt (and no change) when fewer than n are free. A reallocated block loses its hash.
  std::optional<std::vector<BlockId>> allocate(int n);

  // Takes exactly these blocks (distinct) with ref count 1, evicting their hashes, when every
  // one is free; otherwise returns false and changes nothing. free() gives them back.
  [[nodiscard]] bool take(std::span<const BlockId> blocks);

  // Forgets the hash of a free block (it stays free, now uncached); false when the block is in
  // use or has no hash.
  bool uncache(BlockId block);

  // Drops one reference per listed block; blocks reaching 0 join the free-list tail in the order
  // given. Pass a request's blocks last-first so that its tail blocks, the least likely to be
  // shared, are evicted first. Freeing a block with ref count 0 is a bug (S4KV_CHECK).
  void free(std::span<const BlockId> blocks);

  // Takes one more reference on each block (a prefix-cache hit); a free block leaves the free
  // list.
  void touch(std::span<const BlockId> blocks);

  // The block cached under `hash`, in use or free. No side effects.
  std::optional<BlockId> lookup(BlockHash hash) const;

  // Registers an in-use, full, not yet cached block under `hash`. Returns false (block left
  // uncached) when another block already holds the hash: two requests computed the same prefix at
  // once, and the first one stays the cached copy. Returns false when prefix caching is off.
  bool cache_full_block(BlockId block, BlockHash hash);

  int num_blocks() const { return static_cast<int>(blocks_.size()); }
  int num_free_blocks() const { return num_free_; }
  // Free blocks that still carry a hash (cached: a prefix hit may take them back), O(1).
  int num_free_cached_blocks() const { return num_free_cached_; }
  // Fraction of blocks in use, 0..1 (vllm:kv_cache_usage_perc).
  double usage() const;
  bool prefix_caching_enabled() const { return enable_prefix_caching_; }

  // Prefix-cache counters in tokens, as vLLM's vllm:prefix_cache_queries_total / _hits_total:
  // the cache manager records each admitted request's prompt length and its cached prefix.
  void record_prefix_cache_query(int64_t num_queried_tokens, int64_t num_hit_tokens);
  int64_t prefix_cache_queries() const { return prefix_cache_queries_; }
  int64_t prefix_cache_hits() const { return prefix_cache_hits_; }

  // For tests and diagnostics.
  int ref_count(BlockId block) const;
  std::optional<BlockHash> block_hash(BlockId block) const;
  // The free blocks in allocation order: the free list head first, then the last-resort list.
  std::vector<BlockId> free_list() const;
  int last_resort_from() const { return last_resort_from_; }

  // S4KV_CHECK on any broken invariant listed above. O(num_blocks).
  void check_invariants() const;

 private:
  static constexpr BlockId kNone = -1;

  struct Block {
    int ref_count = 0;
    std::optional<BlockHash> hash;
    BlockId prev = kNone;  // free-list links, kNone at the ends and while in use
    BlockId next = kNone;
    bool in_free_list = false;
  };

  Block& at(BlockId block);
  const Block& at(BlockId block) const;
  int list_of(BlockId block) const { return block >= last_resort_from_ ? 1 : 0; }
  void push_back_free(BlockId block);
  void unlink_free(BlockId block);
  void evict_hash(BlockId block);
  void check_free_list(int list, std::vector<char>& seen) const;
  void check_hash_map() const;

  std::vector<Block> blocks_;
  int last_resort_from_;
  // [0]: the free list, [1]: the last-resort list.
  BlockId head_[2] = {kNone, kNone};
  BlockId tail_[2] = {kNone, kNone};
  int num_free_in_[2] = {0, 0};
  int num_free_ = 0;
  int num_free_cached_ = 0;  // free blocks with a hash
  bool enable_prefix_caching_;
  std::unordered_map<BlockHash, BlockId> cached_blocks_;
  int64_t prefix_cache_queries_ = 0;
  int64_t prefix_cache_hits_ = 0;
};

}  // namespace s4kv::kv
