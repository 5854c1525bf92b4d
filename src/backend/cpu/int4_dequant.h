// The int4_kivi block dequantization of the CPU cache's attention reads (keys per channel,
// values per token group), in AVX2 with the reference's arithmetic (code * scale, then + zero:
// no FMA), so its floats equal kv::dequantize_keys_block_ref / dequantize_values_block_ref bit
// for bit (tests/backend/cpu_kv_dtypes_test.cc); the scalar references for kScalar (what
// cpu_isa() is without AVX2) or a head_dim above 128. isa must be supported (cpu_supports).
#pragma once

#include <cstddef>
#include <span>

#include "backend/cpu/gemm16.h"
#include "kv/int4_kivi_layout.h"

namespace s4kv::backend::cpu {

void dequantize_keys_block(CpuIsa isa, const kv::Int4KiviLayout& layout,
                           std::span<const std::byte> block, std::span<float> keys);
void dequantize_values_block(CpuIsa isa, const kv::Int4KiviLayout& layout,
                             std::span<const std::byte> block, std::span<float> values);

}  // namespace s4kv::backend::cpu
