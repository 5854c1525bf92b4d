// Internal to gemm16.cc and gemm16_packed.cc: exact widening of 16-bit weights (bf16 / fp16) to
// fp32, one value or a vector of 8 (AVX2 + F16C) or 16 (AVX-512F), and the target attributes
// their kernels are compiled with (the rest of the program stays baseline x86-64; callers check
// cpu_supports() first).
#pragma once

// GCC 12's AVX-512 headers build "undefined" vectors by self-initialization, which
// -Wuninitialized reports inside every inlined intrinsic; nothing here reads an uninitialized
// value.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <cstdint>

#include "common/half.h"

#define S4KV_AVX2 __attribute__((target("avx2,fma,f16c")))
#define S4KV_AVX512 __attribute__((target("avx512f")))

namespace s4kv::backend::cpu::simd {

inline float widen1(uint16_t h, bool bf16) { return bf16 ? bf16_to_float(h) : fp16_to_float(h); }

// 8 values from p (unaligned).
template <bool BF16>
S4KV_AVX2 inline __m256 widen8(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if constexpr (BF16) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  } else {
    return _mm256_cvtph_ps(h);
  }
}

// 16 values from p (unaligned).
template <bool BF16>
S4KV_AVX512 inline __m512 widen16v(const uint16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  if constexpr (BF16) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  } else {
    return _mm512_cvtph_ps(h);
  }
}

}  // namespace s4kv::backend::cpu::simd
