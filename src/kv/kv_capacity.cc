// KV capacity planning (see kv_capacity.h).
#include "kv/kv_capacity.h"

#include <cmath>
#include <limits>
#include <sstream>

#include "common/check.h"
#include "kv/block_pool.h"

namespace s4kv::kv {
namespace {

// Bytes of one block. Every format's block is a whole number of bytes (kv-format.md); the
// per-token figure is a double only because 4D/B need not be whole per token.
int64_t block_bytes(KvCacheDtype dtype, int64_t num_layers, int64_t num_kv_heads, int64_t head_dim,
                    int block_size, int value_group_size) {
  const double per_token =
      kv_bytes_per_token(dtype, num_layers, num_kv_heads, head_dim, block_size, value_group_size);
  const double per_block = per_token * block_size;
  const auto rounded = static_cast<int64_t>(std::llround(per_block));
  S4KV_CHECK(std::fabs(per_block - static_cast<double>(rounded)) < 1e-6 * per_block, "block of ",
             per_block, " bytes is not whole");
  return rounded;
}

}  // namespace

int64_t num_blocks_for_budget(int64_t budget_bytes, int64_t bytes_per_block) {
  S4KV_CHECK(budget_bytes > 0 && bytes_per_block > 0, "budget_bytes=", budget_bytes,
             " bytes_per_block=", bytes_per_block);
  return budget_bytes / bytes_per_block;
}

Result<KvCapacity> plan_kv_capacity(int64_t budget_bytes, KvCacheDtype dtype, int64_t num_layers,
                                    int64_t num_kv_heads, int64_t head_dim, int block_size,
                                    int value_group_size) {
  if (budget_bytes <= 0) {
    return invalid_argument("--kv-cache-memory=" + std::to_string(budget_bytes) +
                            " must be positive");
  }
  KvCapacity c;
  c.dtype = dtype;
  c.budget_bytes = budget_bytes;
  c.block_size = block_size;
  c.bytes_per_block =
      block_bytes(dtype, num_layers, num_kv_heads, head_dim, block_size, value_group_size);
  c.num_blocks = num_blocks_for_budget(budget_bytes, c.bytes_per_block);
  if (c.num_blocks < 1) {
    return invalid_argument("--kv-cache-memory=" + std::to_string(budget_bytes) +
                            " holds no KV block: one block of " + std::to_string(block_size) +
                            " tokens needs " + std::to_string(c.bytes_per_block) + " bytes (" +
                            std::string(kv_cache_dtype_name(dtype)) + ")");
  }
  if (c.num_blocks > std::numeric_limits<BlockId>::max()) {
    return invalid_argument("--kv-cache-memory=" + std::to_string(budget_bytes) + " makes " +
                            std::to_string(c.num_blocks) + " blocks; at most " +
                            std::to_string(std::numeric_limits<BlockId>::max()) + " are supported");
  }
  c.num_tokens = c.num_blocks * block_size;
  const int64_t bytes_per_block_16bit = block_bytes(KvCacheDtype::k16Bit, num_layers, num_kv_heads,
                                                    head_dim, block_size, value_group_size);
  c.num_tokens_16bit = num_blocks_for_budget(budget_bytes, bytes_per_block_16bit) * block_size;
  c.density = static_cast<double>(bytes_per_block_16bit) / static_cast<double>(c.bytes_per_block);
  return c;
}

std::string format_kv_capacity(const KvCapacity& c) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(2);
  os << "KV cache: " << static_cast<double>(c.budget_bytes) / (1 << 30) << " GiB "
     << kv_cache_dtype_name(c.dtype) << ", " << c.num_blocks << " blocks of " << c.block_size
     << " tokens (" << c.bytes_per_block << " bytes each) = " << c.num_tokens
     << " tokens (16-bit: " << c.num_tokens_16bit << " tokens), density " << c.density
     << "x 16-bit";
  return os.str();
}

}  // namespace s4kv::kv
