// Device helpers that read the cache's element formats, shared by the kernels that read int4_kivi
// blocks and 16-bit rows (dequantize, commit, attention): each the CPU reference's arithmetic,
// rounded step by step (no FMA contraction), but the codes as exact fp16 integers (for the
// attention kernels' fp16 arithmetic).
#pragma once

#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>

namespace s4kv::backend::cuda {

// 16-bit cache bits (bf16 or fp16) widened exactly to fp32.
__device__ inline float widen16(uint16_t h, bool bf16) {
  return bf16 ? __uint_as_float(uint32_t{h} << 16) : __half2float(__ushort_as_half(h));
}

// The fp16 value at `index` of an fp16 part of a block (k_scale, k_zero, v_scale, v_zero).
__device__ inline float fp16_at(const std::byte* part, size_t index) {
  return __half2float(__ushort_as_half(reinterpret_cast<const uint16_t*>(part)[index]));
}

// Channel c of a token's code words (the format's nibble order, docs/kv-format.md),
// dequantized as the reference: float(q) * scale, then + zero.
__device__ inline float dequant_int4(const uint32_t* words, int c, float scale, float zero) {
  const int j = c % 8;
  const uint32_t q = (words[c / 8] >> (4 * ((j % 2) * 4 + j / 2))) & 0xfu;
  return __fadd_rn(__fmul_rn(static_cast<float>(q), scale), zero);
}

// Two 4-bit codes of x as an fp16 pair of exact integers 0..15: those in bits 0..3 and 16..19
// under the exponent of 1024 (0x6400, where those bits weigh 1..8), or those in bits 4..7 and
// 20..23 under the exponent of 64 (0x5400), minus the exponent's value.
template <uint32_t kMask, uint32_t kMagic>
__device__ inline uint32_t codes_under_f16x2(uint32_t x) {
  uint32_t y;
  const uint32_t magic = kMagic;
#ifdef S4KV_CUDA_EMULATION
  y = (x & kMask) | magic;  // LOP3's 0xea
#else
  asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(y) : "r"(x), "r"(kMask), "r"(magic));
#endif
  const __half2 h =
      __hsub2(*reinterpret_cast<const __half2*>(&y), *reinterpret_cast<const __half2*>(&magic));
  return *reinterpret_cast<const uint32_t*>(&h);
}
__device__ inline uint32_t codes_to_f16x2(uint32_t x) {
  return codes_under_f16x2<0x000f000fu, 0x64006400u>(x);
}
__device__ inline uint32_t codes_hi_to_f16x2(uint32_t x) {
  return codes_under_f16x2<0x00f000f0u, 0x54005400u>(x);
}
// The eight codes of a code word (elements 0, 2, 4, 6, 1, 3, 5, 7 from its least significant
// nibble: the format's order) as exact fp16 pairs of elements (0, 1), (2, 3), (4, 5), (6, 7).
__device__ inline void codes8_to_f16x2(uint32_t w, uint32_t (&out)[4]) {
  out[0] = codes_to_f16x2(w);
  out[1] = codes_hi_to_f16x2(w);
  out[2] = codes_to_f16x2(w >> 8);
  out[3] = codes_hi_to_f16x2(w >> 8);
}

// The residual ring's row of position p: ring blocks of b rows, position p in block p / b % ring.
// b and ring are powers of two (kv_format.h's block sizes; ring = 1 + window blocks, 1 or 2), so
// that row is p % (ring b), a mask (ring_row_mask), not a 64-bit division.
__host__ __device__ inline int ring_row_mask(int b, int ring) { return ring * b - 1; }
__device__ inline int64_t ring_row(int64_t p, int b, int ring) {
  return p & ring_row_mask(b, ring);
}

// A seat's residual ring, [2, ring * b, kv_dim] 16-bit (K rows, then V rows), seat_stride
// elements from the previous seat's (at least 2 * ring * b * kv_dim): where position p's K row
// starts; its V row is ring_v_offset elements after it.
__device__ inline int64_t ring_k_offset(int64_t seat, int64_t p, int b, int ring, int64_t kv_dim,
                                        int64_t seat_stride) {
  return seat * seat_stride + ring_row(p, b, ring) * kv_dim;
}
__host__ __device__ inline int64_t ring_v_offset(int b, int ring, int64_t kv_dim) {
  return static_cast<int64_t>(ring) * b * kv_dim;
}
// Whether seat_stride leaves room for a whole ring (K and V rows): what every launcher that
// addresses the rings checks.
inline bool ring_stride_fits(int64_t seat_stride, int b, int ring, int64_t kv_dim) {
  return seat_stride >= 2 * ring_v_offset(b, ring, kv_dim);
}

// Whether position p of a sequence of seq_len tokens is kept in the residual ring after the
// step: from kept = seq_len / b - (ring - 1) blocks on (the tail, and with the window the last
// full block; int4_kivi_cache.cuh's residual_write).
__device__ inline bool ring_keeps(int64_t p, int64_t seq_len, int b, int ring) {
  const int64_t kept_blocks = seq_len / b - (ring - 1);
  return p >= (kept_blocks > 0 ? kept_blocks : 0) * b;
}

// Elements from one sink block to the next (PagedAttentionArgs::sink_stride; 0: packed).
__host__ __device__ inline int64_t sink_stride_or_packed(int64_t sink_stride, int b,
                                                         int64_t kv_dim) {
  return sink_stride > 0 ? sink_stride : 2 * static_cast<int64_t>(b) * kv_dim;
}

}  // namespace s4kv::backend::cuda
