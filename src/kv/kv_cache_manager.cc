// KvCacheManager (see kv_cache_manager.h).
#include "kv/kv_cache_manager.h"

#include <algorithm>

#include "common/check.h"

namespace s4kv::kv {

KvCacheManager::KvCacheManager(int num_blocks, int block_size, bool enable_prefix_caching,
                               uint64_t salt)
    : pool_(num_blocks, enable_prefix_caching), block_size_(block_size), salt_(salt) {
  S4KV_CHECK(block_size > 0, "block_size=", block_size);
}

int64_t KvCacheManager::num_blocks_for_tokens(int64_t num_tokens) const {
  return (num_tokens + block_size_ - 1) / block_size_;
}

ComputedBlocks KvCacheManager::get_computed_blocks(std::span<const int32_t> token_ids) const {
  ComputedBlocks out;
  out.num_queried_tokens = static_cast<int64_t>(token_ids.size());
  if (!pool_.prefix_caching_enabled() || token_ids.empty()) return out;
  // Full blocks within all tokens but the last: a fully cached prompt still computes one token.
  const size_t max_blocks = (token_ids.size() - 1) / static_cast<size_t>(block_size_);
  // Hash block by block and stop at the first miss: a long prompt with a cold prefix costs one
  // block hash, not the whole prompt's.
  for (size_t i = 0; i < max_blocks; ++i) {
    const BlockHash parent = i == 0 ? salt_ : out.hashes.back();
    const BlockHash hash =
        hash_block(salt_, parent, token_ids.subspan(i * block_size_, block_size_));
    const std::optional<BlockId> block = pool_.lookup(hash);
    if (!block.has_value()) break;
    out.blocks.push_back(*block);
    out.hashes.push_back(hash);
  }
  out.num_computed_tokens = static_cast<int64_t>(out.blocks.size()) * block_size_;
  return out;
}

// Computed blocks that are free must leave the free list when touched, so they count against
// the free blocks available for new allocations.
int KvCacheManager::num_evictable(std::span<const BlockId> blocks) const {
  return static_cast<int>(std::count_if(blocks.begin(), blocks.end(),
                                        [&](BlockId b) { return pool_.ref_count(b) == 0; }));
}

bool KvCacheManager::allocate_slots(RequestId id, int64_t num_new_tokens,
                                    const ComputedBlocks& computed) {
  S4KV_CHECK(num_new_tokens >= 0, "num_new_tokens=", num_new_tokens);
  const auto it = requests_.find(id);
  const bool is_new = it == requests_.end();
  S4KV_CHECK(is_new || computed.blocks.empty(), "request ", id,
             " already has blocks; computed blocks are for new requests only");
  S4KV_CHECK(computed.hashes.size() == computed.blocks.size() &&
                 computed.num_computed_tokens ==
                     static_cast<int64_t>(computed.blocks.size()) * block_size_,
             "inconsistent ComputedBlocks");

  const int64_t num_have =
      static_cast<int64_t>(is_new ? computed.blocks.size() : it->second.blocks.size());
  const int64_t num_tokens =
      (is_new ? computed.num_computed_tokens : it->second.num_tokens) + num_new_tokens;
  const int64_t num_needed = std::max<int64_t>(0, num_blocks_for_tokens(num_tokens) - num_have);
  if (num_needed + num_evictable(computed.blocks) > pool_.num_free_blocks()) return false;

  // Touch first: allocate() takes from the free-list head and must not evict the hits.
  pool_.touch(computed.blocks);
  std::optional<std::vector<BlockId>> fresh = pool_.allocate(static_cast<int>(num_needed));
  S4KV_CHECK(fresh.has_value(), "free-block count was checked above");

  RequestBlocks& req = is_new ? requests_[id] : it->second;
  if (is_new) {
    req.blocks = computed.blocks;
    req.hashes = computed.hashes;
    req.num_cached_blocks = computed.blocks.size();
    if (pool_.prefix_caching_enabled()) {
      pool_.record_prefix_cache_query(computed.num_queried_tokens, computed.num_computed_tokens);
    }
  }
  req.blocks.insert(req.blocks.end(), fresh->begin(), fresh->end());
  req.num_tokens = num_tokens;
  return true;
}

void KvCacheManager::cache_blocks(RequestId id, std::span<const int32_t> token_ids,
                                  int64_t num_computed_tokens) {
  const auto it = requests_.find(id);
  S4KV_CHECK(it != requests_.end(), "cache_blocks for unknown request ", id);
  RequestBlocks& req = it->second;
  S4KV_CHECK(num_computed_tokens >= 0 && num_computed_tokens <= req.num_tokens &&
                 num_computed_tokens <= static_cast<int64_t>(token_ids.size()),
             "num_computed_tokens=", num_computed_tokens, " slots=", req.num_tokens,
             " tokens=", token_ids.size());
  if (!pool_.prefix_caching_enabled()) return;
  extend_block_hashes(req.hashes, token_ids.first(static_cast<size_t>(num_computed_tokens)),
                      block_size_, salt_);
  for (; req.num_cached_blocks < req.hashes.size(); ++req.num_cached_blocks) {
    // A false return means another block already holds this prefix; ours stays uncached.
    (void)pool_.cache_full_block(req.blocks[req.num_cached_blocks],
                                 req.hashes[req.num_cached_blocks]);
  }
}

void KvCacheManager::free(RequestId id) {
  const auto it = requests_.find(id);
  if (it == requests_.end()) return;
  const std::vector<BlockId>& blocks = it->second.blocks;
  const std::vector<BlockId> reversed(blocks.rbegin(), blocks.rend());
  pool_.free(reversed);
  requests_.erase(it);
}

std::span<const BlockId> KvCacheManager::block_table(RequestId id) const {
  const auto it = requests_.find(id);
  S4KV_CHECK(it != requests_.end(), "block_table for unknown request ", id);
  return it->second.blocks;
}

int64_t KvCacheManager::num_tokens(RequestId id) const {
  const auto it = requests_.find(id);
  S4KV_CHECK(it != requests_.end(), "num_tokens for unknown request ", id);
  return it->second.num_tokens;
}

void KvCacheManager::check_invariants() const {
  pool_.check_invariants();
  std::vector<int> refs(static_cast<size_t>(pool_.num_blocks()), 0);
  for (const auto& [id, req] : requests_) {
    S4KV_CHECK(static_cast<int64_t>(req.blocks.size()) == num_blocks_for_tokens(req.num_tokens),
               "request ", id, " has ", req.blocks.size(), " blocks for ", req.num_tokens,
               " tokens");
    S4KV_CHECK(
        req.num_cached_blocks == req.hashes.size() && req.num_cached_blocks <= req.blocks.size(),
        "request ", id, " cached ", req.num_cached_blocks, " hashes ", req.hashes.size());
    for (BlockId b : req.blocks) ++refs[static_cast<size_t>(b)];
  }
  // Only this manager takes references, so each ref count is exactly the number of tables
  // holding the block: a mismatch is a leak or a double free.
  for (BlockId b = 0; b < pool_.num_blocks(); ++b) {
    S4KV_CHECK(pool_.ref_count(b) == refs[static_cast<size_t>(b)], "block ", b, " ref_count ",
               pool_.ref_count(b), " but held by ", refs[static_cast<size_t>(b)], " tables");
  }
}

}  // namespace s4kv::kv
