// Attention's two inner loops over int4_kivi pool blocks read in place (docs/kv-format.md
// "The CPU backend"): the scores of a KV head's queries against a block's keys, and the values'
// weighted sums, straight from the packed codes and the block's scales and zeros. No fp32 copy
// of the context is made: a key row is dequantized and rotated once (registers and a few rows of
// scratch) and then dotted with every query of the KV head's group, a value row is dequantized
// once per few queries and summed into their outputs.
//
// Exactness: every element sees the operations of the gather path that attention.cc runs on
// dequantize_keys_block / rope_rotate / dequantize_values_block rows (code * scale, then + zero;
// the rotation's two rounded products and their sum; the dot product's eight partial sums in
// channel order added as a tree; o += w * v in position order; no FMA), so both give the same
// bits (tests/backend/int4_attention_test.cc). Scalar kernels are the reference; AVX2 and
// AVX-512 ones run as cpu_isa() (or the caller's isa) says. The dot's eight partial sums fix
// its lane count: AVX-512 puts two key rows side by side in a register (eight positions a pass,
// their trees made together), and picks each value from a table of the 16 values
// code * scale + zero of its position and group, computed with the same roundings.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "backend/cpu/gemm16.h"
#include "backend/rope_table.h"
#include "kv/int4_kivi_layout.h"

namespace s4kv::backend::cpu {

// The largest head_dim these kernels take (their scratch rows are on the stack).
inline constexpr int kInt4AttentionMaxHeadDim = 256;

// scores[r][t] = (qs[r] . key_t) * scale for t < B and r < qs.size(), key_t the block's key
// row t dequantized and, when rope is not null (keys stored before RoPE), rotated to position
// pos0 + t with rope's cos/sin (rope must hold those positions). qs[r]: [head_dim] fp32;
// scores[r]: B floats. isa must be supported.
void int4_block_scores(CpuIsa isa, const kv::Int4KiviLayout& layout, const std::byte* block,
                       const RopeTable* rope, int64_t pos0, std::span<const float* const> qs,
                       float scale, std::span<float* const> scores);

// o[r][c] += w[r][t] * value_t[c] for t = 0 .. B - 1 in that order, c < head_dim, r <
// w.size(), value_t the block's value row t dequantized (left in the Hadamard domain if it was
// quantized there). w[r]: B floats; o[r]: [head_dim] fp32.
void int4_block_values(CpuIsa isa, const kv::Int4KiviLayout& layout, const std::byte* block,
                       std::span<const float* const> w, std::span<float* const> o);

}  // namespace s4kv::backend::cpu
