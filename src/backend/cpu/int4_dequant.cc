#include "backend/cpu/int4_dequant.h"

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "backend/cpu/int4_simd.h"
#include "common/check.h"
#include "common/half.h"
#include "kv/int4_kivi_ref.h"

namespace s4kv::backend::cpu {
namespace {

#define S4KV_AVX2 S4KV_INT4_AVX2
using simd::codes8;
using simd::fp16x8;

S4KV_AVX2 void keys_avx2(const kv::Int4KiviLayout& l, const std::byte* b, float* out) {
  const int words = l.words_per_token();
  __m256 scale[16], zero[16];  // head_dim <= 128 (checked)
  for (int w = 0; w < words; ++w) {
    scale[w] = fp16x8(b + l.k_scale_offset + static_cast<size_t>(w) * 16);
    zero[w] = fp16x8(b + l.k_zero_offset + static_cast<size_t>(w) * 16);
  }
  const std::byte* codes = b + l.k_codes_offset;
  for (int t = 0; t < l.block_size; ++t) {
    for (int w = 0; w < words; ++w) {
      uint32_t word;
      std::memcpy(&word, codes + (static_cast<size_t>(t) * words + w) * 4, 4);
      const __m256 scaled = _mm256_mul_ps(codes8(word), scale[w]);
      _mm256_storeu_ps(out + t * l.head_dim + w * 8, _mm256_add_ps(scaled, zero[w]));
    }
  }
}

S4KV_AVX2 void values_avx2(const kv::Int4KiviLayout& l, const std::byte* b, float* out) {
  const int words = l.words_per_token();
  const int groups = l.num_value_groups();
  const int words_per_group = l.value_group_size / 8;
  const std::byte* codes = b + l.v_codes_offset;
  for (int t = 0; t < l.block_size; ++t) {
    for (int g = 0; g < groups; ++g) {
      const auto i = static_cast<size_t>(t * groups + g);
      uint16_t s, z;
      std::memcpy(&s, b + l.v_scale_offset + i * 2, 2);
      std::memcpy(&z, b + l.v_zero_offset + i * 2, 2);
      const __m256 scale = _mm256_set1_ps(fp16_to_float(s));
      const __m256 zero = _mm256_set1_ps(fp16_to_float(z));
      for (int w = g * words_per_group; w < (g + 1) * words_per_group; ++w) {
        uint32_t word;
        std::memcpy(&word, codes + (static_cast<size_t>(t) * words + w) * 4, 4);
        const __m256 scaled = _mm256_mul_ps(codes8(word), scale);
        _mm256_storeu_ps(out + t * l.head_dim + w * 8, _mm256_add_ps(scaled, zero));
      }
    }
  }
}

// The AVX2 form, after checking the block and output sizes; false (nothing done) where the
// reference must run: the scalar choice or a head_dim above 128.
bool dequantize_avx2(CpuIsa isa, const kv::Int4KiviLayout& l, std::span<const std::byte> block,
                     std::span<float> out, bool keys) {
  S4KV_CHECK(cpu_supports(isa), "int4 dequantize: this processor lacks ", cpu_isa_name(isa));
  if (isa == CpuIsa::kScalar || l.head_dim > 128) return false;
  S4KV_CHECK(block.size() == l.block_bytes &&
                 out.size() == static_cast<size_t>(l.block_size) * static_cast<size_t>(l.head_dim),
             "int4 dequantize: block or output size");
  S4KV_CHECK(l.head_dim % 8 == 0 && l.value_group_size % 8 == 0, "int4 dequantize: head_dim ",
             l.head_dim);
  (keys ? keys_avx2 : values_avx2)(l, block.data(), out.data());
  return true;
}

}  // namespace

void dequantize_keys_block(CpuIsa isa, const kv::Int4KiviLayout& layout,
                           std::span<const std::byte> block, std::span<float> keys) {
  if (!dequantize_avx2(isa, layout, block, keys, true)) {
    kv::dequantize_keys_block_ref(layout, block, keys);
  }
}

void dequantize_values_block(CpuIsa isa, const kv::Int4KiviLayout& layout,
                             std::span<const std::byte> block, std::span<float> values) {
  if (!dequantize_avx2(isa, layout, block, values, false)) {
    kv::dequantize_values_block_ref(layout, block, values);
  }
}

}  // namespace s4kv::backend::cpu
