// The normalized Walsh-Hadamard transform of int4_kivi's value-rotation variant (issue 12,
// docs/kv-format.md "Candidate formats"): a token's D values (D a power of two, 128 served) are
// rotated by H_D / sqrt(D) before per-token quantization, which spreads an outlier channel over
// all channels; attention accumulates the rotated values and rotates the sum back once per head
// (H / sqrt(D) is its own inverse). Part of the bit-exact contract: the quantizer's bytes depend
// on these fp32 roundings, so the operation order is fixed here and src/kv is built without
// FMA contraction.
#pragma once

#include <span>

namespace s4kv::kv {

// fp32(1 / sqrt(128)), the normalization of the 128-point transform.
inline constexpr float kHadamardScale128 = 0x1.6a09e6p-4f;

// In place, x.size() a power of two (checked). Stages h = 1, 2, 4, ..., n/2 in that order; in a
// stage every pair (i, i + h) with i % (2h) < h becomes (a + b, a - b) in fp32; then every
// element is multiplied by fp32(1 / sqrt(n)) (n = 128: kHadamardScale128; other n: the double
// 1 / sqrt(n) rounded to fp32). The fp32 result is defined by this order.
void hadamard_ref(std::span<float> x);

}  // namespace s4kv::kv
