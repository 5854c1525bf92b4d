// fp16 and bf16 <-> fp32 conversion, bit-exact with round-to-nearest-even (as the CUDA
// intrinsics __float2half_rn / __float2bfloat16_rn), NaN preserved. Host code only; CUDA
// kernels use the cuda_fp16/cuda_bf16 intrinsics, which tests check against these.
#pragma once

#include <bit>
#include <cstdint>

namespace s4kv {

inline float bf16_to_float(uint16_t h) { return std::bit_cast<float>(uint32_t{h} << 16); }

inline uint16_t float_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float fp16_to_float(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));  // inf/NaN
  if (exp != 0) return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
  if (mant == 0) return std::bit_cast<float>(sign);
  // Subnormal: normalize.
  int e = -1;
  do {
    mant <<= 1;
    ++e;
  } while ((mant & 0x400u) == 0);
  return std::bit_cast<float>(sign | ((112u - e) << 23) | ((mant & 0x3ffu) << 13));
}

inline uint16_t float_to_fp16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (abs < 0x38800000u) {
    // Result is subnormal (or zero): scale into the 10-bit mantissa with RNE.
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);  // below half the smallest subnormal
    const uint32_t exp = abs >> 23;
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - exp;  // 14..24 -> bits dropped
    uint32_t q = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  uint32_t v = abs - 0x38000000u;  // rebias exponent 127 -> 15
  v += 0xfffu + ((v >> 13) & 1u);
  return static_cast<uint16_t>(sign | (v >> 13));
}

}  // namespace s4kv
