// KV memory budget -> number of pool blocks, and the capacity line logged at start-up:
// tokens the budget holds in the chosen dtype and in 16-bit, and the density between them.
// Pure arithmetic over kv_format.h's bytes per token; it allocates nothing.
//
// The budget is for pool blocks only. int4_kivi also keeps each running sequence's last,
// partly filled block in 16-bit (the residual); the caller subtracts that memory first.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "kv/kv_format.h"

namespace s4kv::kv {

// --kv-cache-memory default on CPU.
inline constexpr int64_t kDefaultKvCacheMemoryBytes = int64_t{1} << 30;

// Whole blocks that fit in budget_bytes (floor; 0 when not even one fits). Both arguments must
// be positive (S4KV_CHECK).
int64_t num_blocks_for_budget(int64_t budget_bytes, int64_t bytes_per_block);

struct KvCapacity {
  KvCacheDtype dtype = KvCacheDtype::kInt4Kivi;
  int64_t budget_bytes = 0;
  int block_size = 0;
  int64_t bytes_per_block = 0;  // one block of block_size tokens, all layers and KV heads
  int64_t num_blocks = 0;
  int64_t num_tokens = 0;        // num_blocks * block_size
  int64_t num_tokens_16bit = 0;  // what the same budget holds with a 16-bit cache
  // Tokens per byte against 16-bit: 16-bit block bytes / block bytes (3.66 for int4_kivi at
  // B=64, Gv=128). From block sizes, not the token counts, so budget rounding does not skew it.
  double density = 0;
};

// Plans the pool for a model shape and KV format. Refuses (kInvalidArgument, naming
// --kv-cache-memory) a budget that holds no block, or more blocks than a BlockId can number.
// block_size and value_group_size must be valid (validate_kv_layout) and the shape positive.
Result<KvCapacity> plan_kv_capacity(int64_t budget_bytes, KvCacheDtype dtype, int64_t num_layers,
                                    int64_t num_kv_heads, int64_t head_dim,
                                    int block_size = kDefaultBlockSize,
                                    int value_group_size = kDefaultValueGroupSize);

// One line for the start-up log; Qwen2.5-0.5B's shape (24 layers, 2 KV heads) at the defaults:
// "KV cache: 1.00 GiB int4_kivi, 2496 blocks of 64 tokens (430080 bytes each) = 159744 tokens
// (16-bit: 43648 tokens), density 3.66x 16-bit".
std::string format_kv_capacity(const KvCapacity& capacity);

}  // namespace s4kv::kv
