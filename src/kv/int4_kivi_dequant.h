// Fast dequantization of int4_kivi blocks for the CPU backend's attention: the same numbers as
// dequantize_keys_block_ref / dequantize_values_block_ref, bit for bit (tested against them),
// with the fp16 scale and zero widened once per channel (keys) or per token group (values)
// instead of once per element. Compiled, like the reference, without FMA contraction.
#pragma once

#include <cstddef>
#include <span>

#include "kv/int4_kivi_layout.h"

namespace s4kv::kv {

// keys / values: [B, D] fp32 out, host; keys come back pre-RoPE, as they were quantized.
void dequantize_keys_block(const Int4KiviLayout& layout, std::span<const std::byte> block,
                           std::span<float> keys);
void dequantize_values_block(const Int4KiviLayout& layout, std::span<const std::byte> block,
                             std::span<float> values);

}  // namespace s4kv::kv
