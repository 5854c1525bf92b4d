// kv_write, CPU reference: stores the new tokens' keys (after RoPE) and values into the
// paged 16-bit cache at their slots, rounded to the cache dtype (round to nearest even).
// Attention then reads the rounded values back, the current tokens' own included, which is
// what a 16-bit KV cache computes (and what the golden logits model).
#pragma once

#include <cstdint>
#include <span>

#include "common/dtype.h"

namespace s4kv::backend::cpu {

// k, v: [num_tokens, row_stride] fp32 rows, each starting with num_kv_heads * head_dim values
// (row_stride lets them point into the fused qkv buffer); slot_mapping: [num_tokens] slots in
// 0..num_slots-1; k_cache, v_cache: [num_slots, num_kv_heads * head_dim] 16-bit bits of one
// layer (PagedKvCache::k/v); dtype kBF16 or kF16.
void kv_write_ref(std::span<const float> k, std::span<const float> v, int64_t row_stride,
                  int64_t kv_elems, std::span<const int64_t> slot_mapping,
                  std::span<uint16_t> k_cache, std::span<uint16_t> v_cache, DType dtype);

}  // namespace s4kv::backend::cpu
