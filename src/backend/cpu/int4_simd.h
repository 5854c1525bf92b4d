// Internal to int4_dequant.cc and int4_attention.cc: AVX2 + F16C decoding of int4_kivi code
// words and fp16 parameters (kv/int4_kivi_layout.h has the nibble order), and the target those
// kernels are compiled with: no FMA, so that code * scale + zero and the sums that follow round
// as the reference does. Callers check cpu_supports() first.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#define S4KV_INT4_AVX2 __attribute__((target("avx2,f16c")))

namespace s4kv::backend::cpu::simd {

// The 8 codes of a word in channel order as floats: element j sits in nibble
// int4_nibble_of(j) = (j % 2) * 4 + j / 2.
S4KV_INT4_AVX2 inline __m256 codes8(uint32_t word) {
  const __m256i shifts = _mm256_setr_epi32(0, 16, 4, 20, 8, 24, 12, 28);
  const __m256i q = _mm256_and_si256(
      _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(word)), shifts), _mm256_set1_epi32(0xf));
  return _mm256_cvtepi32_ps(q);
}

// 8 fp16 values from p (unaligned), widened exactly.
S4KV_INT4_AVX2 inline __m256 fp16x8(const std::byte* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

}  // namespace s4kv::backend::cpu::simd
