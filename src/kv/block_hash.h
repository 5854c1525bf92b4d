// Chained block hashes for the prefix cache. A full block of `block_size` token ids is named
// by hash(parent, tokens [, extra keys]), where `parent` is the previous block's hash and the
// first block's parent is a per-process random salt. Equal hashes therefore mean equal token
// prefixes (up to a 2^-64 collision chance), so a cached block can stand in for recomputing it.
//
// The hash is SipHash-2-4 (Aumasson and Bernstein, 2012), our own implementation, keyed with the
// salt: without the salt an outside client cannot construct colliding prompts to read or poison
// another user's cached KV. Partial blocks are never hashed. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace s4kv::kv {

using BlockHash = uint64_t;

// SipHash-2-4 of `data` with the 128-bit key (k0, k1): bytes 0..7 and 8..15 of the paper's key,
// read little-endian. Output as the paper's 64-bit value (its little-endian bytes are the MAC).
uint64_t siphash24(uint64_t k0, uint64_t k1, std::span<const uint8_t> data);

// A fresh random salt for this process (std::random_device), drawn once on first call and then
// returned unchanged, so every request of a process sees the same chain. Thread-safe.
uint64_t process_hash_salt();

// Hash of one full block. `token_ids` is exactly the block's tokens; `extra_keys` distinguish
// blocks whose KV differs for equal tokens (e.g. a LoRA id or multimodal input hash; empty
// today). Token ids are hashed as little-endian int32 after the parent, extra keys as
// little-endian uint64 after a separator, so the byte stream is unambiguous.
BlockHash hash_block(uint64_t salt, BlockHash parent, std::span<const int32_t> token_ids,
                     std::span<const uint64_t> extra_keys = {});

// Hashes of every full block of `token_ids` (size / block_size of them; the trailing partial
// block is skipped), chained from the salt. `block_size` must be positive (S4KV_CHECK).
std::vector<BlockHash> hash_request_blocks(std::span<const int32_t> token_ids, int block_size,
                                           uint64_t salt);

// Appends hashes for the full blocks of `token_ids` that `hashes` does not cover yet, chaining
// from hashes.back() (or the salt): a request's hashes grow by one block at a time as it
// decodes, without rehashing the prefix.
void extend_block_hashes(std::vector<BlockHash>& hashes, std::span<const int32_t> token_ids,
                         int block_size, uint64_t salt);

}  // namespace s4kv::kv
