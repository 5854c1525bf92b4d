// fp8_e4m3 (OCP E4M3FN) <-> fp32, as vLLM's fp8 KV cache uses it with its default per-tensor
// scale 1.0: CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3) and its inverse.
// Sign, 4 exponent bits (bias 7), 3 mantissa bits; no infinities; S.1111.111 is NaN; largest
// finite 448 (0x7e), smallest normal 2^-6, smallest subnormal 2^-9.
//   fp32 -> fp8: round to nearest, ties to even; |x| > 448 (infinities too) saturates to
//                +-448; NaN -> 0x7f (the sign of a NaN is dropped, as CUDA does); results that
//                round to zero keep their sign (-0 -> 0x80).
//   fp8 -> fp32: exact; 0x7f and 0xff -> quiet NaN.
// Integer bit operations only, so no compiler flag can change a result. Host code; CUDA
// kernels use the cuda_fp8 intrinsics, which tests compare against these.
#pragma once

#include <bit>
#include <cstdint>

namespace s4kv::kv {

inline constexpr uint8_t kFp8E4M3MaxBits = 0x7e;  // 448
inline constexpr uint8_t kFp8E4M3NanBits = 0x7f;

inline float fp8_e4m3_to_float(uint8_t v) {
  const uint32_t sign = uint32_t{v & 0x80u} << 24;
  const uint32_t exp = (v >> 3) & 0xfu;
  const uint32_t mant = v & 0x7u;
  if (exp == 0xf && mant == 0x7) return std::bit_cast<float>(0x7fc00000u);
  if (exp != 0) return std::bit_cast<float>(sign | ((exp + 120u) << 23) | (mant << 20));
  // Subnormal: mant * 2^-9, exact in fp32 (a small integer times a power of two).
  const float mag = static_cast<float>(mant) * 0x1p-9f;
  return sign ? -mag : mag;
}

inline uint8_t float_to_fp8_e4m3(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return kFp8E4M3NanBits;
  // 464 = 448 + half an ulp: it ties to 448 (even mantissa), anything larger saturates.
  if (abs > 0x43e80000u) return sign | kFp8E4M3MaxBits;
  if (abs < 0x3c800000u) {
    // Below 2^-6: an fp8 subnormal, m * 2^-9 with m = 0..8 (8 is the smallest normal, 0x08).
    if (abs <= 0x3a800000u) return sign;  // |x| <= 2^-10: half the smallest subnormal, or less
    const uint32_t exp = abs >> 23;
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 141u - exp;  // q = mant * 2^(exp - 150) / 2^-9; exp 117..120
    uint32_t q = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<uint8_t>(sign | q);
  }
  // Normal: rebias 127 -> 7 and round the 23-bit mantissa to 3 bits; a carry into the exponent
  // is the correct next binade, and 464 was excluded above so it cannot reach the NaN code.
  uint32_t v = abs - (120u << 23);
  v += 0x7ffffu + ((v >> 20) & 1u);
  return static_cast<uint8_t>(sign | (v >> 20));
}

}  // namespace s4kv::kv
