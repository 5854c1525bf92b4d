#include "kv/kv_format.h"

#include <algorithm>
#include <string>

namespace s4kv::kv {
namespace {

template <size_t N>
bool allowed(const std::array<int, N>& set, int v) {
  return std::find(set.begin(), set.end(), v) != set.end();
}

template <size_t N>
std::string list(const std::array<int, N>& set) {
  std::string s;
  for (int v : set) s += (s.empty() ? "" : ", ") + std::to_string(v);
  return s;
}

// Bytes per token for one layer and one KV head.
double bytes_per_head(KvCacheDtype dtype, double d, double b, double gv) {
  switch (dtype) {
    case KvCacheDtype::k16Bit:
      return 2.0 * 2.0 * d;
    case KvCacheDtype::kInt4Kivi:
      return d / 2 + 4 * d / b + d / 2 + 4 * d / gv;
    case KvCacheDtype::kFp8E4M3:
      return 2.0 * d;
  }
  S4KV_CHECK(false, "unknown KvCacheDtype ", static_cast<int>(dtype));
  return 0;
}

}  // namespace

std::string_view kv_cache_dtype_name(KvCacheDtype dtype) {
  switch (dtype) {
    case KvCacheDtype::k16Bit:
      return "16bit";
    case KvCacheDtype::kInt4Kivi:
      return "int4_kivi";
    case KvCacheDtype::kFp8E4M3:
      return "fp8_e4m3";
  }
  return "unknown";
}

Status validate_block_size(int block_size) {
  if (allowed(kAllowedBlockSizes, block_size)) return Status::ok();
  return unsupported("unsupported block_size=" + std::to_string(block_size) +
                     " (supported: " + list(kAllowedBlockSizes) + ")");
}

Status validate_value_group_size(int value_group_size) {
  if (allowed(kAllowedValueGroupSizes, value_group_size)) return Status::ok();
  return unsupported("unsupported value_group_size=" + std::to_string(value_group_size) +
                     " (supported: " + list(kAllowedValueGroupSizes) + ")");
}

Status validate_kv_layout(int block_size, int value_group_size) {
  S4KV_RETURN_IF_ERROR(validate_block_size(block_size));
  return validate_value_group_size(value_group_size);
}

double kv_bytes_per_token(KvCacheDtype dtype, int64_t num_layers, int64_t num_kv_heads,
                          int64_t head_dim, int block_size, int value_group_size) {
  S4KV_CHECK(num_layers > 0 && num_kv_heads > 0 && head_dim > 0, "num_layers=", num_layers,
             " num_kv_heads=", num_kv_heads, " head_dim=", head_dim);
  S4KV_CHECK(validate_kv_layout(block_size, value_group_size).is_ok(), "block_size=", block_size,
             " value_group_size=", value_group_size);
  const double per_head =
      bytes_per_head(dtype, static_cast<double>(head_dim), block_size, value_group_size);
  return per_head * static_cast<double>(num_layers) * static_cast<double>(num_kv_heads);
}

Status validate_int4_variant(const Int4KiviVariant& variant, int64_t head_dim) {
  if (variant.sink_blocks < 0 || variant.sink_blocks > kMaxSinkBlocks) {
    return unsupported("unsupported int4 sink_blocks=" + std::to_string(variant.sink_blocks) +
                       " (supported: 0.." + std::to_string(kMaxSinkBlocks) + ")");
  }
  if (variant.window_blocks < 0 || variant.window_blocks > kMaxWindowBlocks) {
    return unsupported("unsupported int4 window_blocks=" + std::to_string(variant.window_blocks) +
                       " (supported: 0.." + std::to_string(kMaxWindowBlocks) + ")");
  }
  if (variant.value_hadamard && (head_dim <= 0 || (head_dim & (head_dim - 1)) != 0)) {
    return unsupported("unsupported head_dim=" + std::to_string(head_dim) +
                       " for the value Hadamard rotation (a power of two)");
  }
  return Status::ok();
}

double kv_bytes_at_context(KvCacheDtype dtype, int64_t context, int64_t num_layers,
                           int64_t num_kv_heads, int64_t head_dim, int block_size,
                           int value_group_size, const Int4KiviVariant& variant) {
  S4KV_CHECK(context >= 0, "context=", context);
  const double per_token =
      kv_bytes_per_token(dtype, num_layers, num_kv_heads, head_dim, block_size, value_group_size);
  if (dtype != KvCacheDtype::kInt4Kivi) return per_token * static_cast<double>(context);
  const double per_token_16 =
      kv_bytes_per_token(KvCacheDtype::k16Bit, num_layers, num_kv_heads, head_dim);
  const int64_t full = context / block_size;
  const int64_t sink = std::min<int64_t>(full, variant.sink_blocks);
  const int64_t window = std::min<int64_t>(full - sink, variant.window_blocks);
  const int64_t quantized_tokens = (full - sink - window) * block_size;
  return per_token * static_cast<double>(quantized_tokens) +
         per_token_16 * static_cast<double>(context - quantized_tokens);
}

}  // namespace s4kv::kv
