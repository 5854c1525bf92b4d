#include "kv/int4_kivi_dequant.h"

#include <array>
#include <cstdint>
#include <cstring>

#include "common/check.h"
#include "common/half.h"

namespace s4kv::kv {
namespace {

constexpr int kMaxHeadDim = 256;

void check_sizes(const Int4KiviLayout& l, size_t out_size, size_t block_size) {
  S4KV_CHECK(l.head_dim > 0 && l.head_dim <= kMaxHeadDim, "int4_kivi dequantize: head_dim ",
             l.head_dim);
  S4KV_CHECK(out_size == static_cast<size_t>(l.block_size * l.head_dim),
             "int4_kivi dequantize: output of ", out_size, " floats");
  S4KV_CHECK(block_size == l.block_bytes, "int4_kivi dequantize: block of ", block_size, " bytes");
}

float load_half(const std::byte* p, size_t index) {
  uint16_t h;
  std::memcpy(&h, p + index * 2, 2);
  return fp16_to_float(h);
}

// The 8 codes of one word in channel order (the word holds them interleaved: int4_nibble_of).
inline void unpack(uint32_t w, float* q) {
  for (int j = 0; j < kInt4CodesPerWord; ++j) {
    q[j] = static_cast<float>((w >> (4 * int4_nibble_of(j))) & 0xfu);
  }
}

}  // namespace

void dequantize_keys_block(const Int4KiviLayout& l, std::span<const std::byte> block,
                           std::span<float> keys) {
  check_sizes(l, keys.size(), block.size());
  const std::byte* b = block.data();
  std::array<float, kMaxHeadDim> scale, zero;
  for (int c = 0; c < l.head_dim; ++c) {
    scale[static_cast<size_t>(c)] = load_half(b + l.k_scale_offset, static_cast<size_t>(c));
    zero[static_cast<size_t>(c)] = load_half(b + l.k_zero_offset, static_cast<size_t>(c));
  }
  const int words = l.words_per_token();
  const std::byte* codes = b + l.k_codes_offset;
  for (int t = 0; t < l.block_size; ++t) {
    float* out = keys.data() + static_cast<size_t>(t) * l.head_dim;
    for (int w = 0; w < words; ++w) {
      uint32_t word;
      std::memcpy(&word, codes + (static_cast<size_t>(t) * words + w) * 4, 4);
      float q[kInt4CodesPerWord];
      unpack(word, q);
      for (int j = 0; j < kInt4CodesPerWord; ++j) {
        const auto c = static_cast<size_t>(w * kInt4CodesPerWord + j);
        const float scaled = q[j] * scale[c];  // as int4_dequant_ref: multiply, then add
        out[c] = scaled + zero[c];
      }
    }
  }
}

void dequantize_values_block(const Int4KiviLayout& l, std::span<const std::byte> block,
                             std::span<float> values) {
  check_sizes(l, values.size(), block.size());
  const std::byte* b = block.data();
  const int groups = l.num_value_groups();
  const int words = l.words_per_token();
  const int words_per_group = l.value_group_size / kInt4CodesPerWord;
  const std::byte* codes = b + l.v_codes_offset;
  for (int t = 0; t < l.block_size; ++t) {
    float* out = values.data() + static_cast<size_t>(t) * l.head_dim;
    for (int g = 0; g < groups; ++g) {
      const auto i = static_cast<size_t>(t * groups + g);
      const float scale = load_half(b + l.v_scale_offset, i);
      const float zero = load_half(b + l.v_zero_offset, i);
      for (int w = g * words_per_group; w < (g + 1) * words_per_group; ++w) {
        uint32_t word;
        std::memcpy(&word, codes + (static_cast<size_t>(t) * words + w) * 4, 4);
        float q[kInt4CodesPerWord];
        unpack(word, q);
        for (int j = 0; j < kInt4CodesPerWord; ++j) {
          const float scaled = q[j] * scale;
          out[w * kInt4CodesPerWord + j] = scaled + zero;
        }
      }
    }
  }
}

}  // namespace s4kv::kv
