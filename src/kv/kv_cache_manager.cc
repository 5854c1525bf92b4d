// KvCacheManager (see kv_cache_manager.h).
#include "kv/kv_cache_manager.h"

#include <algorithm>

#include "common/check.h"

namespace s4kv::kv {

KvCacheManager::KvCacheManager(int num_blocks, int block_size, bool enable_prefix_caching,
                               uint64_t salt, int num_sink_blocks, int num_seats,
                               int blocks_per_seat, int sink_run_blocks)
    : pool_(num_blocks, enable_prefix_caching,
            static_cast<int>(std::max<int64_t>(
                0, int64_t{num_blocks} -
                       int64_t{std::max(0, num_seats)} * std::max(0, blocks_per_seat) -
                       int64_t{num_sink_blocks > 0 ? num_sink_blocks + 1 : 0} *
                           std::max(0, sink_run_blocks)))),
      block_size_(block_size),
      salt_(salt),
      num_seats_(num_seats),
      blocks_per_seat_(blocks_per_seat),
      sink_run_blocks_(num_sink_blocks > 0 ? sink_run_blocks : 0),
      seat_base_(seat_runs_begin(num_blocks, num_seats, blocks_per_seat)),
      sink_base_(sink_runs_begin(seat_base_, num_sink_blocks, sink_run_blocks_)),
      seat_held_(static_cast<size_t>(std::max(0, num_seats)), 0) {
  S4KV_CHECK(block_size > 0 && num_sink_blocks >= 0 && num_seats >= 0 && blocks_per_seat >= 0 &&
                 sink_run_blocks >= 0 && sink_base_ >= 0,
             "block_size=", block_size, " num_sink_blocks=", num_sink_blocks,
             " num_seats=", num_seats, " blocks_per_seat=", blocks_per_seat,
             " sink_run_blocks=", sink_run_blocks, " num_blocks=", num_blocks);
  if (num_sink_blocks > 0) sink_pool_.emplace(num_sink_blocks, enable_prefix_caching);
  // The dummy block's sink (KvCacheConfig::dummy_block(), sink num_sink_blocks): its run is
  // padding's, never a table's.
  if (sink_run_blocks_ > 0) S4KV_CHECK(pool_.take(sink_run(num_sink_blocks)), "dummy sink run");
}

std::vector<BlockId> KvCacheManager::sink_run(int k) const {
  std::vector<BlockId> run(static_cast<size_t>(sink_run_blocks_));
  for (int j = 0; j < sink_run_blocks_; ++j) {
    run[static_cast<size_t>(j)] = static_cast<BlockId>(sink_block(k) + j);
  }
  return run;
}

bool KvCacheManager::sink_held(int k) const {
  return sink_pool_->ref_count(k) > 0 || sink_pool_->block_hash(k).has_value();
}

bool KvCacheManager::run_free(int64_t lo, int64_t hi, std::span<const BlockId> computed) const {
  for (int64_t b = lo; b < hi; ++b) {
    if (pool_.ref_count(static_cast<BlockId>(b)) != 0) return false;
  }
  for (size_t i = 0; i < computed.size(); ++i) {
    // Table index 0 may be a sink id (not the main pool); the others are main-pool ids.
    if (!in_sink(i) && computed[i] >= lo && computed[i] < hi) return false;
  }
  return true;
}

KvCacheManager::SinkChoice KvCacheManager::choose_sink(std::span<const BlockId> computed) const {
  const std::vector<BlockId> free = sink_pool_->free_list();  // least recently used first
  for (BlockId k : free) {  // an empty sink block whose run is free: no prefix is forgotten
    if (!sink_held(k) && run_free(sink_block(k), sink_block(k) + sink_run_blocks_, computed)) {
      return {k, true};
    }
  }
  for (BlockId k : free) {  // else the least recently used cached one (its run is held)
    if (sink_held(k) && (computed.empty() || to_local(0, computed[0]) != k)) return {k, false};
  }
  return {};
}

std::vector<int> KvCacheManager::reclaimable_sinks(BlockId keep, BlockId keep2) const {
  std::vector<int> out;
  if (sink_run_blocks_ == 0) return out;
  for (BlockId k : sink_pool_->free_list()) {
    if (k != keep && k != keep2 && sink_held(k)) out.push_back(k);
  }
  return out;
}

int64_t KvCacheManager::num_usable_blocks() const {
  return int64_t{pool_.num_blocks()} - sink_run_blocks_;  // 0 without sink runs
}

double KvCacheManager::usage() const {
  return 1.0 -
         static_cast<double>(num_available_blocks()) / static_cast<double>(num_usable_blocks());
}

int64_t KvCacheManager::num_available_blocks() const {
  // A free sink block holds its run exactly when it is cached (sink_held): O(1), twice a step.
  const int64_t reclaimable = sink_run_blocks_ > 0 ? sink_pool_->num_free_cached_blocks() : 0;
  return pool_.num_free_blocks() + reclaimable * sink_run_blocks_;
}

std::vector<BlockId> KvCacheManager::seat_run(int seat) const {
  std::vector<BlockId> run(static_cast<size_t>(blocks_per_seat_));
  for (int j = 0; j < blocks_per_seat_; ++j) {
    run[static_cast<size_t>(j)] = static_cast<BlockId>(seat_block(seat) + j);
  }
  return run;
}

int KvCacheManager::find_seat(std::span<const BlockId> computed) const {
  for (int s = 0; s < num_seats_; ++s) {
    if (!seat_held_[static_cast<size_t>(s)] &&
        run_free(seat_block(s), seat_block(s) + blocks_per_seat_, computed)) {
      return s;
    }
  }
  return -1;
}

int KvCacheManager::seat(RequestId id) const {
  const auto it = requests_.find(id);
  S4KV_CHECK(it != requests_.end() && it->second.seat >= 0, "request ", id, " has no seat");
  return it->second.seat;
}

int KvCacheManager::num_free_seats() const {
  return static_cast<int>(std::count(seat_held_.begin(), seat_held_.end(), uint8_t{0}));
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
    const std::optional<BlockId> block = pool_of(i).lookup(hash);
    if (!block.has_value()) break;
    out.blocks.push_back(to_table(i, *block));
    out.hashes.push_back(hash);
  }
  out.num_computed_tokens = static_cast<int64_t>(out.blocks.size()) * block_size_;
  return out;
}

// Computed blocks that are free must leave the free list when touched, so they count against
// the free blocks available for new allocations.
KvCacheManager::Counts KvCacheManager::num_evictable(std::span<const BlockId> table_prefix) const {
  Counts c;
  for (size_t i = 0; i < table_prefix.size(); ++i) {
    if (pool_of(i).ref_count(to_local(i, table_prefix[i])) == 0) ++(in_sink(i) ? c.sink : c.main);
  }
  return c;
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
  // The table's index 0 is the only one a sink pool supplies.
  const int sink_needed = sink_pool_ && num_have == 0 && num_needed > 0 ? 1 : 0;
  const int main_needed = static_cast<int>(num_needed) - sink_needed;
  const Counts evictable = num_evictable(computed.blocks);
  const int seat = is_new && num_seats_ > 0 ? find_seat(computed.blocks) : -1;
  if (is_new && num_seats_ > 0 && seat < 0) return false;
  const int seat_blocks = seat >= 0 ? blocks_per_seat_ : 0;
  SinkChoice sink;
  if (sink_run_blocks_ > 0 && sink_needed > 0) {
    sink = choose_sink(computed.blocks);
    if (sink.slot < 0) return false;
  }
  const int64_t main_demand =
      main_needed + evictable.main + seat_blocks + (sink.take_run ? sink_run_blocks_ : 0);
  // Cached free sink blocks whose runs may be freed, in order: looked for only when the main
  // pool's free blocks fall short (a walk over the free sinks, which a step's every running
  // request would otherwise pay: 0.9 ms a step at 256 of 1,024 seats).
  std::vector<int> reclaim;
  if (sink_run_blocks_ > 0 && main_demand > pool_.num_free_blocks()) {
    const BlockId hit = sink_needed == 0 && !computed.blocks.empty()
                            ? to_local(0, computed.blocks[0])
                            : BlockId{-1};
    reclaim = reclaimable_sinks(sink.slot, hit);
  }
  if (main_demand >
      pool_.num_free_blocks() + static_cast<int64_t>(reclaim.size()) * sink_run_blocks_) {
    return false;
  }
  if (sink_run_blocks_ == 0 &&
      sink_needed + evictable.sink > (sink_pool_ ? sink_pool_->num_free_blocks() : 0)) {
    return false;
  }

  // Touch first: allocate() takes from the free-list head and must not evict the hits.
  for (size_t i = 0; i < computed.blocks.size(); ++i) {
    const BlockId local = to_local(i, computed.blocks[i]);
    pool_of(i).touch(std::span(&local, 1));
  }
  if (seat >= 0) {
    S4KV_CHECK(pool_.take(seat_run(seat)), "seat ", seat, "'s blocks were checked free above");
    seat_held_[static_cast<size_t>(seat)] = 1;
  }
  std::vector<BlockId> fresh;
  if (sink_needed > 0 && sink_run_blocks_ > 0) {
    if (sink.take_run) {
      S4KV_CHECK(pool_.take(sink_run(sink.slot)), "sink ", sink.slot,
                 "'s run was checked free above");
    }
    const BlockId k = sink.slot;
    S4KV_CHECK(sink_pool_->take(std::span(&k, 1)), "sink ", k, " was free above");
    fresh.push_back(to_table(0, k));
  } else if (sink_needed > 0) {
    const std::optional<std::vector<BlockId>> got = sink_pool_->allocate(1);
    S4KV_CHECK(got.has_value(), "free sink-block count was checked above");
    fresh.push_back(to_table(0, got->front()));
  }
  // Runs of cached free sinks back to the main pool, as many as it lacks.
  for (size_t j = 0; j < reclaim.size() && pool_.num_free_blocks() < main_needed; ++j) {
    S4KV_CHECK(sink_pool_->uncache(reclaim[j]), "sink ", reclaim[j], " was free and cached");
    pool_.free(sink_run(reclaim[j]));
  }
  const std::optional<std::vector<BlockId>> main = pool_.allocate(main_needed);
  S4KV_CHECK(main.has_value(), "free-block count was checked above");
  fresh.insert(fresh.end(), main->begin(), main->end());

  RequestBlocks& req = is_new ? requests_[id] : it->second;
  if (is_new) {
    req.blocks = computed.blocks;
    req.hashes = computed.hashes;
    req.num_cached_blocks = computed.blocks.size();
    req.seat = seat;
    if (pool_.prefix_caching_enabled()) {
      pool_.record_prefix_cache_query(computed.num_queried_tokens, computed.num_computed_tokens);
    }
  }
  req.blocks.insert(req.blocks.end(), fresh.begin(), fresh.end());
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
    const size_t i = req.num_cached_blocks;
    (void)pool_of(i).cache_full_block(to_local(i, req.blocks[i]), req.hashes[i]);
  }
}

void KvCacheManager::free(RequestId id) {
  const auto it = requests_.find(id);
  if (it == requests_.end()) return;
  const std::vector<BlockId>& blocks = it->second.blocks;
  for (size_t i = blocks.size(); i-- > 0;) {  // last block first
    const BlockId local = to_local(i, blocks[i]);
    pool_of(i).free(std::span(&local, 1));
    // A sink block left empty (not cached): its run goes back to the main pool.
    if (in_sink(i) && sink_run_blocks_ > 0 && !sink_held(local)) pool_.free(sink_run(local));
  }
  if (const int seat = it->second.seat; seat >= 0) {
    pool_.free(seat_run(seat));
    seat_held_[static_cast<size_t>(seat)] = 0;
  }
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

int64_t KvCacheManager::num_new_blocks(RequestId id, int64_t num_new_tokens) const {
  const auto it = requests_.find(id);
  S4KV_CHECK(it != requests_.end() && !it->second.blocks.empty(), "num_new_blocks for request ", id,
             " without blocks");
  const RequestBlocks& r = it->second;
  return std::max<int64_t>(0, num_blocks_for_tokens(r.num_tokens + num_new_tokens) -
                                  static_cast<int64_t>(r.blocks.size()));
}

void KvCacheManager::check_invariants() const {
  pool_.check_invariants();
  if (sink_pool_) sink_pool_->check_invariants();
  std::vector<int> refs(static_cast<size_t>(pool_.num_blocks()), 0);
  std::vector<int> sink_refs(static_cast<size_t>(sink_pool_ ? sink_pool_->num_blocks() : 0), 0);
  for (const auto& [id, req] : requests_) {
    S4KV_CHECK(static_cast<int64_t>(req.blocks.size()) == num_blocks_for_tokens(req.num_tokens),
               "request ", id, " has ", req.blocks.size(), " blocks for ", req.num_tokens,
               " tokens");
    S4KV_CHECK(
        req.num_cached_blocks == req.hashes.size() && req.num_cached_blocks <= req.blocks.size(),
        "request ", id, " cached ", req.num_cached_blocks, " hashes ", req.hashes.size());
    for (size_t i = 0; i < req.blocks.size(); ++i) {
      const BlockId local = to_local(i, req.blocks[i]);
      std::vector<int>& r = in_sink(i) ? sink_refs : refs;
      S4KV_CHECK(local >= 0 && local < static_cast<BlockId>(r.size()), "request ", id,
                 " holds block ", req.blocks[i], " at index ", i, " outside its pool");
      ++r[static_cast<size_t>(local)];
    }
    S4KV_CHECK((req.seat >= 0) == (num_seats_ > 0) &&
                   (req.seat < 0 || seat_held_[static_cast<size_t>(req.seat)]),
               "request ", id, " seat ", req.seat);
    if (req.seat >= 0) {
      for (BlockId b : seat_run(req.seat)) ++refs[static_cast<size_t>(b)];
    }
  }
  for (int k = 0; sink_run_blocks_ > 0 && k <= sink_pool_->num_blocks(); ++k) {
    if (k < sink_pool_->num_blocks() && !sink_held(k)) continue;  // k == num: the dummy's
    for (BlockId b : sink_run(k)) ++refs[static_cast<size_t>(b)];
  }
  S4KV_CHECK(num_seats_ - num_free_seats() == (num_seats_ > 0 ? num_requests() : 0), "seats held ",
             num_seats_ - num_free_seats(), " by ", num_requests(), " requests");
  // Only this manager takes references, so each ref count is exactly the number of tables
  // holding the block: a mismatch is a leak or a double free.
  const auto check = [](const BlockPool& pool, const std::vector<int>& r, BlockId offset) {
    for (BlockId b = 0; b < pool.num_blocks(); ++b) {
      S4KV_CHECK(pool.ref_count(b) == r[static_cast<size_t>(b)], "block ", b + offset,
                 " ref_count ", pool.ref_count(b), " but held by ", r[static_cast<size_t>(b)],
                 " tables");
    }
  };
  check(pool_, refs, 0);
  if (sink_pool_) check(*sink_pool_, sink_refs, pool_.num_blocks());
}

}  // namespace s4kv::kv
