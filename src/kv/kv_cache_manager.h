// KvCacheManager: per-request block tables over a BlockPool, with prefix caching of full blocks.
// Engine-agnostic: request ids and token ids in, block ids out; it never sees KV bytes.
//
// Sink blocks (int4_kivi v2, docs/kv-format.md): with num_sink_blocks > 0 the first block of
// every request comes from a second pool of that many blocks, numbered after the main pool
// (ids num_blocks .. num_blocks + num_sink_blocks - 1), which the backend keeps in 16-bit. Both
// pools cache and share blocks the same way; the hash chain does not care which pool a block
// is in. The engine sizes the sink pool at one block per running sequence, so admitting a
// request under max_num_seqs always finds one (free or evictable).
//
// Seats (backend.h): with num_seats > 0 every request holds one of seats 0..num_seats-1 from
// its first allocate_slots to free(), the lowest free one. With blocks_per_seat > 0 (int4_kivi:
// the seat's 16-bit residual ring lives in the pool) seat s also holds the main-pool blocks
// seat_block(s) .. + blocks_per_seat - 1, the top num_seats * blocks_per_seat blocks of the pool
// cut into one run per seat: a request takes the lowest seat whose run is free (evicting cached
// blocks there), and requests are given those blocks only when no other block is free
// (BlockPool's last-resort list), so memory a seat does not use holds tokens.
//
// Sink runs (sink_run_blocks > 0, with sink blocks): sink block k's 16-bit bytes are those of
// main-pool blocks sink_block(k) .. + sink_run_blocks - 1, runs just below the seats' (and,
// like theirs, the last resort), so that the sinks take no memory off the pool's; one more run
// after them, the dummy block's sink (padding's), is never handed out. The run
// of a sink block that holds a sink (in use, or free and still cached for prefix hits) is out of
// circulation; the run of a free uncached one is free main-pool blocks. A new request takes an
// uncached free sink block whose run is free, else the least recently used cached free one;
// when the main pool runs short, cached free sink blocks are forgotten (least recently used
// first) and their runs freed.
//
// One request's life, as the scheduler drives it (vLLM v1's KVCacheManager protocol):
//   1. computed = get_computed_blocks(tokens)          longest cached prefix of full blocks
//   2. allocate_slots(id, num_new_tokens, computed)    all or nothing; later steps pass no
//                                                      computed blocks, just more tokens
//   3. after the step that wrote the KV: cache_blocks(id, tokens, num_computed_tokens)
//   4. free(id) on finish, abort or preemption
// Blocks returned by get_computed_blocks stay valid only until the pool next changes, so step 2
// must follow step 1 with no other allocation in between.
//
// Thread ownership: engine thread only.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/block_hash.h"
#include "kv/block_pool.h"

namespace s4kv::kv {

// The engine's internal sequence number for a request (not the OpenAI "id" string).
using RequestId = uint64_t;

// A prefix-cache match for a request that has no blocks yet.
struct ComputedBlocks {
  std::vector<BlockId> blocks;      // cached blocks of the prefix, in order
  std::vector<BlockHash> hashes;    // their chained hashes (reused, not recomputed)
  int64_t num_computed_tokens = 0;  // blocks.size() * block_size
  int64_t num_queried_tokens = 0;   // the prompt length looked up (for the hit-rate counters)
};

class KvCacheManager {
 public:
  // block_size > 0; the pool has num_blocks blocks, the sink pool num_sink_blocks (0: none, every
  // block from the main pool). `salt` roots the hash chain: the process salt in production, a
  // fixed value in tests that compare hashes. Seats as above (num_seats * blocks_per_seat <=
  // num_blocks, S4KV_CHECK), sink runs as above ((num_sink_blocks + 1) * sink_run_blocks more).
  KvCacheManager(int num_blocks, int block_size, bool enable_prefix_caching,
                 uint64_t salt = process_hash_salt(), int num_sink_blocks = 0, int num_seats = 0,
                 int blocks_per_seat = 0, int sink_run_blocks = 0);

  // Longest prefix of `token_ids` made of cached full blocks, stopping one token short of the
  // whole prompt: the last token must be computed to produce logits. Empty without prefix
  // caching. Takes no references: allocate_slots does.
  ComputedBlocks get_computed_blocks(std::span<const int32_t> token_ids) const;

  // Grows the request's block table to hold num_new_tokens more tokens. For a request without a
  // table, `computed` (from get_computed_blocks) becomes the table's prefix and counts as already
  // computed; for a running request it must be empty. A new request also takes a seat (when
  // there are seats). Returns false, changing nothing, when the pool cannot supply every block
  // needed or no seat is free (with its blocks).
  [[nodiscard]] bool allocate_slots(RequestId id, int64_t num_new_tokens,
                                    const ComputedBlocks& computed = {});

  // Caches the request's blocks that are full within its first num_computed_tokens tokens and not
  // cached yet. Call after the step that wrote their KV, so that a block is never found by
  // another request before its contents exist. `token_ids` holds at least that many tokens
  // (prompt then output).
  void cache_blocks(RequestId id, std::span<const int32_t> token_ids, int64_t num_computed_tokens);

  // Releases the request's blocks, last block first so that its tail is evicted before its
  // (more shareable) prefix. A request without a table (never admitted, or already freed) is a
  // no-op, so finish and abort paths need not know whether it was scheduled.
  void free(RequestId id);

  bool has_request(RequestId id) const { return requests_.contains(id); }
  // The request's seat (S4KV_CHECK: it has one), and the first pool block of a seat's run.
  int seat(RequestId id) const;
  int64_t seat_block(int seat) const { return seat_base_ + int64_t{seat} * blocks_per_seat_; }
  int num_seats() const { return num_seats_; }
  // The first main-pool block of sink block k's run (sink runs only).
  int64_t sink_block(int k) const { return sink_base_ + int64_t{k} * sink_run_blocks_; }
  // Where the runs sit in a pool of num_blocks (what backends get as KvCacheConfig's
  // ring_base_block and sink_base_block): the seats' at the top, the sinks' (the dummy block's
  // last) just below them.
  static int64_t seat_runs_begin(int64_t num_blocks, int64_t num_seats, int64_t blocks_per_seat) {
    return num_blocks - num_seats * blocks_per_seat;
  }
  static int64_t sink_runs_begin(int64_t seat_runs_begin, int64_t num_sink_blocks,
                                 int64_t sink_run_blocks) {
    return seat_runs_begin - (num_sink_blocks + 1) * sink_run_blocks;
  }
  // Main-pool blocks an allocation can have: the free ones and those of cached free sink runs.
  int64_t num_available_blocks() const;
  // Main-pool blocks a table can ever have: all but the dummy block's sink run.
  int64_t num_usable_blocks() const;
  // Fraction of the usable blocks not available, 0..1 (vllm:kv_cache_usage_perc: cached blocks
  // nobody holds count as free, sink runs of cached free sinks included).
  double usage() const;
  int num_free_seats() const;
  // The request's block ids, in token order. The request must have a table (S4KV_CHECK).
  std::span<const BlockId> block_table(RequestId id) const;
  // Tokens the table has slots for (computed prefix plus every num_new_tokens allocated).
  int64_t num_tokens(RequestId id) const;
  // Blocks allocate_slots(id, num_new_tokens) would take from the main pool for a request that
  // has a table (S4KV_CHECK); it succeeds when the pool has that many free.
  int64_t num_new_blocks(RequestId id, int64_t num_new_tokens) const;

  int block_size() const { return block_size_; }
  int num_requests() const { return static_cast<int>(requests_.size()); }
  // The main pool (usage and prefix-cache counters) and the sink pool, whose ids are offset by
  // pool().num_blocks() in block tables.
  const BlockPool& pool() const { return pool_; }
  const BlockPool* sink_pool() const { return sink_pool_ ? &*sink_pool_ : nullptr; }
  // Pool invariants plus: every table's blocks are in use, and each block's ref count equals the
  // number of tables holding it.
  void check_invariants() const;

 private:
  struct RequestBlocks {
    std::vector<BlockId> blocks;
    std::vector<BlockHash> hashes;  // chained hashes of the first num_cached_blocks blocks
    int64_t num_tokens = 0;
    size_t num_cached_blocks = 0;  // blocks passed to cache_full_block (or found cached)
    int seat = -1;
  };

  int64_t num_blocks_for_tokens(int64_t num_tokens) const;
  // Table index 0 lives in the sink pool when there is one. Pool-local ids <-> table ids.
  bool in_sink(size_t index) const { return sink_pool_.has_value() && index == 0; }
  BlockPool& pool_of(size_t index) { return in_sink(index) ? *sink_pool_ : pool_; }
  const BlockPool& pool_of(size_t index) const { return in_sink(index) ? *sink_pool_ : pool_; }
  BlockId to_table(size_t index, BlockId local) const {
    return in_sink(index) ? local + pool_.num_blocks() : local;
  }
  BlockId to_local(size_t index, BlockId table_id) const {
    return in_sink(index) ? table_id - pool_.num_blocks() : table_id;
  }
  // Blocks of a table prefix (indices 0..n-1) that are free in their pool, per pool.
  struct Counts {
    int main = 0, sink = 0;
  };
  Counts num_evictable(std::span<const BlockId> table_prefix) const;
  // The lowest seat not held whose run of blocks is free and not among `computed` (prefix hits
  // about to be taken), or -1.
  int find_seat(std::span<const BlockId> computed) const;
  std::vector<BlockId> seat_run(int seat) const;
  // Whether main-pool blocks [lo, hi) (a seat's or a sink's run) are all free and none is among
  // `computed`.
  bool run_free(int64_t lo, int64_t hi, std::span<const BlockId> computed) const;
  // Sink runs: sink block k's main-pool run; whether it holds a sink (in use or cached).
  std::vector<BlockId> sink_run(int k) const;
  bool sink_held(int k) const;
  // The sink block a new request takes (-1: none) and whether its run must be taken.
  struct SinkChoice {
    int slot = -1;
    bool take_run = false;
  };
  SinkChoice choose_sink(std::span<const BlockId> computed) const;
  // Cached free sink blocks whose runs can be freed, least recently used first, but `keep` and
  // `keep2` (-1: none).
  std::vector<int> reclaimable_sinks(BlockId keep, BlockId keep2) const;

  BlockPool pool_;
  std::optional<BlockPool> sink_pool_;
  int block_size_;
  uint64_t salt_;
  int num_seats_, blocks_per_seat_, sink_run_blocks_;
  int64_t seat_base_;  // num_blocks - num_seats * blocks_per_seat
  int64_t sink_base_;  // seat_base_ - (num_sink_blocks + 1) * sink_run_blocks (the dummy run last)
  std::vector<uint8_t> seat_held_;  // [num_seats]
  std::unordered_map<RequestId, RequestBlocks> requests_;
};

}  // namespace s4kv::kv
