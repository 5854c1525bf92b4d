// The RoPE cos/sin table shared by both backends for the int4_kivi key path (DESIGN.md "The
// int4_kivi KV format"): keys of a block that fills are rotated back to pre-RoPE with it
// (rope_unrotate, fp32), and dequantized pre-RoPE keys are rotated again with it inside
// attention (rope_rotate). Both forward passes also rotate q and k with it (cpu/rope.h's rope,
// cuda/rope.cuh). Host-computed once per position, so CPU and CUDA see the same bits.
//
// Entries: cos[pos][i] = float(cos(double(inv_freq[i] * float(pos)))), same for sin, i.e. the
// fp32 angle as transformers forms it, cos/sin in double rounded once: bit for bit the values
// cpu/rope.h's rope_ref uses, so rope_rotate of a key equals rope_ref's rotation of it.
// Layout "rotate half" (channel i pairs with i + head_dim/2). Grows on demand (ensure());
// not thread-safe while growing: grow before handing rows to threads. No fast-math, no FMA
// (built with -ffp-contract=off): the inverse rotation's bits are part of the int4 contract.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/cpu/gemm16.h"
#include "common/check.h"

namespace s4kv::backend {

class RopeTable {
 public:
  // inv_freq: [head_dim / 2] fp32 (cpu/rope.h's rope_inv_freq).
  explicit RopeTable(std::span<const float> inv_freq);

  // Makes rows 0..num_positions-1 available (rounded up to a multiple of 1,024 rows).
  void ensure(int64_t num_positions);
  int64_t num_positions() const { return num_positions_; }
  int64_t half_dim() const { return half_; }
  // [head_dim / 2] fp32 rows of position pos (pos < num_positions(), checked). Inline: the
  // int4_kivi key kernels ask for a row per position.
  const float* cos(int64_t pos) const {
    S4KV_CHECK(pos >= 0 && pos < num_positions_, "RopeTable: position ", pos);
    return cos_.data() + pos * half_;
  }
  const float* sin(int64_t pos) const {
    S4KV_CHECK(pos >= 0 && pos < num_positions_, "RopeTable: position ", pos);
    return sin_.data() + pos * half_;
  }
  // The table rows as one array: [num_positions, head_dim / 2] fp32 each (for a device copy).
  std::span<const float> cos_table() const { return cos_; }
  std::span<const float> sin_table() const { return sin_; }

 private:
  std::vector<float> inv_freq_;
  int64_t half_ = 0;
  int64_t num_positions_ = 0;
  std::vector<float> cos_, sin_;
};

// Forward rotation of one head, as rope_ref: out[i] = x1*c - x2*s, out[i+h] = x2*c + x1*s, each
// product rounded to fp32, then the sum. x, out: [head_dim] fp32 (may alias); cos, sin: a row.
void rope_rotate(const float* x, float* out, const float* cos, const float* sin, int64_t head_dim);

// The inverse (rotation by -angle): out[i] = x1*c + x2*s, out[i+h] = x2*c - x1*s, same rounding.
void rope_unrotate(const float* x, float* out, const float* cos, const float* sin,
                   int64_t head_dim);

// Either of the two above with the given instruction set's kernel (gemm16.h; it must be
// supported): every choice gives the same bits (tests compare them); the two above use
// cpu_isa().
void rope_rotate_isa(cpu::CpuIsa isa, bool inverse, const float* x, float* out, const float* cos,
                     const float* sin, int64_t head_dim);

}  // namespace s4kv::backend
