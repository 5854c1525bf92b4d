// The CPU backend's paged 16-bit KV cache: per layer, one K and one V array of
// [num_blocks, block_size, num_kv_heads, head_dim] 16-bit values (bf16 or fp16 bits), i.e.
// slot s = block_id * block_size + offset holds num_kv_heads * head_dim contiguous values.
// Keys are stored after RoPE. Memory is allocated once at construction and zero-filled; the
// engine's block pool decides which slots are live (this class knows nothing about that).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/cpu/gemm16.h"
#include "common/dtype.h"
#include "common/half.h"

namespace s4kv::backend::cpu {

struct KvCacheShape {
  int64_t num_layers = 0;
  int64_t num_blocks = 0;
  int64_t block_size = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  DType dtype = DType::kBF16;  // kBF16 or kF16

  int64_t num_slots() const { return num_blocks * block_size; }
  int64_t slot_elems() const { return num_kv_heads * head_dim; }
  int64_t layer_elems() const { return num_slots() * slot_elems(); }
};

class PagedKvCache {
 public:
  explicit PagedKvCache(const KvCacheShape& shape);

  const KvCacheShape& shape() const { return shape_; }
  // [num_blocks, block_size, num_kv_heads, head_dim] 16-bit bits of one layer.
  std::span<uint16_t> k(int64_t layer);
  std::span<uint16_t> v(int64_t layer);
  std::span<const uint16_t> k(int64_t layer) const;
  std::span<const uint16_t> v(int64_t layer) const;
  int64_t num_bytes() const { return static_cast<int64_t>(data_.size() * sizeof(uint16_t)); }

 private:
  KvCacheShape shape_;
  std::vector<uint16_t> data_;  // [num_layers, 2 (K, V), layer_elems]
};

// Rounds fp32 to the cache's 16-bit dtype (round to nearest even) and back. Inline: they sit
// in attention's inner gather loop.
inline uint16_t kv_encode(float x, DType dtype) {
  return dtype == DType::kBF16 ? float_to_bf16(x) : float_to_fp16(x);
}
inline float kv_decode(uint16_t bits, DType dtype) {
  return dtype == DType::kBF16 ? bf16_to_float(bits) : fp16_to_float(bits);
}

// Gathers positions [begin, end) of one kv head of a sequence from a paged cache of any element
// type into fp32 rows: row p - begin of keys / values [end - begin, head_dim] (either may be null:
// skipped). k_cache, v_cache: [num_slots, slot_elems] of one layer; table: the sequence's block
// ids; head_offset: kv_head * head_dim; decode_row(src, dst, count): count elements T -> float.
template <typename T, typename DecodeRow>
void gather_paged(std::span<const T> k_cache, std::span<const T> v_cache, int64_t block_size,
                  int64_t slot_elems, const int32_t* table, int64_t head_offset, int64_t head_dim,
                  int64_t begin, int64_t end, float* keys, float* values, DecodeRow decode_row) {
  for (int64_t p = begin; p < end; ++p) {
    const int64_t slot = table[p / block_size] * block_size + p % block_size;
    const int64_t row = (p - begin) * head_dim;
    if (keys != nullptr) {
      decode_row(k_cache.data() + slot * slot_elems + head_offset, keys + row, head_dim);
    }
    if (values != nullptr) {
      decode_row(v_cache.data() + slot * slot_elems + head_offset, values + row, head_dim);
    }
  }
}

// gather_paged over the 16-bit cache (bf16 or fp16 bits), each row widened by gemm16's exact
// vector widening.
inline void gather_paged_16bit(std::span<const uint16_t> k_cache, std::span<const uint16_t> v_cache,
                               DType dtype, int64_t block_size, int64_t slot_elems,
                               const int32_t* table, int64_t head_offset, int64_t head_dim,
                               int64_t begin, int64_t end, float* keys, float* values) {
  const CpuIsa isa = cpu_isa();
  const bool bf16 = dtype == DType::kBF16;
  gather_paged(k_cache, v_cache, block_size, slot_elems, table, head_offset, head_dim, begin, end,
               keys, values, [&](const uint16_t* src, float* dst, int64_t count) {
                 widen16(isa, src, bf16, count, dst);
               });
}

}  // namespace s4kv::backend::cpu
