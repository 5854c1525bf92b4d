// CPU reference quantizer and dequantizer of the int4_kivi format: the bit-exact contract that
// the CUDA quantizer must reproduce byte for byte (DESIGN.md "Exactness", docs/kv-format.md).
// Keys per channel over the block's tokens, values per token per group of Gv channels, both
// asymmetric int4: x ~= q * scale + zero. Single-threaded, host memory; allocates only the
// group parameters (D or B * D / Gv entries). Compiled with -fno-fast-math -ffp-contract=off
// (src/kv/CMakeLists.txt): an FMA or a reassociation would change the bytes.
//
// Not here: inverse RoPE of residual keys (the engine does it before calling these), the pool.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "kv/int4_kivi_layout.h"

namespace s4kv::kv {

// Scale and zero of one quantization group, as stored (fp16 bits).
struct Int4Params {
  uint16_t scale = 0;
  uint16_t zero = 0;
};

// The exact rule for one group whose minimum and maximum are min and max (fp32):
//   min' = min + 0.0f, max' = max + 0.0f          (turns -0 into +0: the bytes cannot depend on
//                                                   the order of a min/max reduction)
//   scale = fp16((max' - min') / 15.0f)           (fp32 subtract, fp32 divide, RNE to fp16)
//   zero  = fp16(min')
Int4Params int4_params_ref(float min, float max);

// q = clamp(rint((x - zero_f) / scale_f), 0, 15) with zero_f, scale_f the stored fp16 values
// widened to fp32, fp32 subtract and divide, rint half-to-even, and q = 0 when scale is +0.
// The clamp is fmin(fmax(r, 0), 15), so a NaN quotient (non-finite input) gives 0.
uint8_t int4_code_ref(float x, Int4Params p);

// x = float(q) * scale_f + zero_f: fp32 multiply, then fp32 add (not fused).
float int4_dequant_ref(uint8_t q, Int4Params p);

// keys:   [B, D] fp32, host, token-major, BEFORE RoPE (the engine inverts RoPE of residual keys).
// block:  layout.block_bytes, host; writes k_codes, k_scale, k_zero only (every byte of them).
void quantize_keys_block_ref(const Int4KiviLayout& layout, std::span<const float> keys,
                             std::span<std::byte> block);

// values: [B, D] fp32, host, token-major.
// block:  writes v_codes, v_scale, v_zero only (every byte of them).
void quantize_values_block_ref(const Int4KiviLayout& layout, std::span<const float> values,
                               std::span<std::byte> block);

// Both halves of one (layer, KV head) block: every byte of the block is written.
void quantize_block_ref(const Int4KiviLayout& layout, std::span<const float> keys,
                        std::span<const float> values, std::span<std::byte> block);

// keys / values: [B, D] fp32 out, host; keys come back pre-RoPE, as they were quantized.
void dequantize_keys_block_ref(const Int4KiviLayout& layout, std::span<const std::byte> block,
                               std::span<float> keys);
void dequantize_values_block_ref(const Int4KiviLayout& layout, std::span<const std::byte> block,
                                 std::span<float> values);

}  // namespace s4kv::kv
