// The int4_kivi reference. Every floating-point step is spelled out in int4_kivi_ref.h; this
// file must stay free of anything a compiler could fuse or reorder (it is built with
// -ffp-contract=off and without fast-math) and of x87 excess precision.
#include "kv/int4_kivi_ref.h"

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/half.h"

static_assert(FLT_EVAL_METHOD == 0, "the int4_kivi reference needs plain fp32 evaluation");

namespace s4kv::kv {
namespace {

void check_input(const Int4KiviLayout& l, size_t num_floats, size_t block_bytes) {
  const size_t want = static_cast<size_t>(l.block_size) * static_cast<size_t>(l.head_dim);
  S4KV_CHECK(l.block_bytes > 0, "Int4KiviLayout not made by Int4KiviLayout::create");
  S4KV_CHECK(num_floats == want, "tensor of ", num_floats, " floats, block holds ", want);
  S4KV_CHECK(block_bytes == l.block_bytes, "block of ", block_bytes, " bytes, layout needs ",
             l.block_bytes);
}

void store_fp16(std::byte* part, size_t index, uint16_t h) { std::memcpy(part + index * 2, &h, 2); }

// Minimum and maximum of n floats `stride` apart. fmin/fmax skip NaN, so only an all-NaN group
// yields NaN; for finite inputs the result does not depend on the scan order (signed zeros are
// canonicalized by int4_params_ref).
Int4Params params_over(const float* x, int n, int stride) {
  float mn = x[0];
  float mx = x[0];
  for (int i = 1; i < n; ++i) {
    const float v = x[static_cast<size_t>(i) * static_cast<size_t>(stride)];
    mn = std::fmin(mn, v);
    mx = std::fmax(mx, v);
  }
  return int4_params_ref(mn, mx);
}

// Writes the [B][D/8] code words of x ([B, D]); params_at(t, c) gives the group of (t, c).
template <typename ParamsAt>
void write_codes(const Int4KiviLayout& l, const float* x, ParamsAt params_at, std::byte* codes) {
  const int words = l.words_per_token();
  for (int t = 0; t < l.block_size; ++t) {
    for (int w = 0; w < words; ++w) {
      std::array<uint8_t, 8> q{};
      for (int j = 0; j < kInt4CodesPerWord; ++j) {
        const int c = w * kInt4CodesPerWord + j;
        q[static_cast<size_t>(j)] = int4_code_ref(x[t * l.head_dim + c], params_at(t, c));
      }
      const uint32_t word = pack_int4x8(q);
      std::memcpy(codes + (static_cast<size_t>(t) * words + w) * 4, &word, 4);
    }
  }
}

// A group's scale and zero widened to fp32 once, for every element of the group.
struct WideParams {
  float scale = 0.0f;
  float zero = 0.0f;
};

WideParams widen(Int4Params p) { return {fp16_to_float(p.scale), fp16_to_float(p.zero)}; }

// The dequantization rule on widened parameters (int4_dequant_ref is this on one element).
float dequant(float q, WideParams p) {
  const float scaled = q * p.scale;
  return scaled + p.zero;
}

// Dequantizes a codes part into out ([B, D]); params_at(t, c) gives the widened group of
// (t, c).
template <typename ParamsAt>
void read_codes(const Int4KiviLayout& l, const std::byte* codes, ParamsAt params_at, float* out) {
  const int words = l.words_per_token();
  for (int t = 0; t < l.block_size; ++t) {
    for (int w = 0; w < words; ++w) {
      uint32_t word;
      std::memcpy(&word, codes + (static_cast<size_t>(t) * words + w) * 4, 4);
      const std::array<uint8_t, 8> q = unpack_int4x8(word);
      for (int j = 0; j < kInt4CodesPerWord; ++j) {
        const int c = w * kInt4CodesPerWord + j;
        out[t * l.head_dim + c] =
            dequant(static_cast<float>(q[static_cast<size_t>(j)]), params_at(t, c));
      }
    }
  }
}

Int4Params load_params(const std::byte* block, size_t scale_offset, size_t zero_offset,
                       size_t index) {
  Int4Params p;
  std::memcpy(&p.scale, block + scale_offset + index * 2, 2);
  std::memcpy(&p.zero, block + zero_offset + index * 2, 2);
  return p;
}

}  // namespace

Int4Params int4_params_ref(float min, float max) {
  const float mn = min + 0.0f;  // -0 + +0 == +0 under round-to-nearest
  const float mx = max + 0.0f;
  const float scale = (mx - mn) / 15.0f;  // a true divide: x * (1/15) rounds differently
  return {float_to_fp16(scale), float_to_fp16(mn)};
}

uint8_t int4_code_ref(float x, Int4Params p) {
  // scale is +0 when max == min or when (max - min) / 15 underflows fp16 (below 2^-25); every
  // code is then 0 and the group dequantizes to zero exactly. The mask also accepts -0.
  if ((p.scale & 0x7fffu) == 0) return 0;
  const float scale = fp16_to_float(p.scale);
  const float zero = fp16_to_float(p.zero);
  const float v = (x - zero) / scale;
  // Rounding scale and zero to fp16 moves the grid: x == min can land below 0 (zero rounded up)
  // and x == max above 15 (scale or zero rounded down), by up to a few steps when scale is an
  // fp16 subnormal or zero's rounding error exceeds scale. The clamp keeps q in 0..15.
  const float r = std::nearbyint(v);  // the default rounding mode: half to even
  return static_cast<uint8_t>(std::fmin(std::fmax(r, 0.0f), 15.0f));
}

float int4_dequant_ref(uint8_t q, Int4Params p) { return dequant(static_cast<float>(q), widen(p)); }

void quantize_keys_block_ref(const Int4KiviLayout& l, std::span<const float> keys,
                             std::span<std::byte> block) {
  check_input(l, keys.size(), block.size());
  std::vector<Int4Params> params(static_cast<size_t>(l.head_dim));
  for (int c = 0; c < l.head_dim; ++c) {
    const Int4Params p = params_over(keys.data() + c, l.block_size, l.head_dim);
    params[static_cast<size_t>(c)] = p;
    store_fp16(block.data() + l.k_scale_offset, static_cast<size_t>(c), p.scale);
    store_fp16(block.data() + l.k_zero_offset, static_cast<size_t>(c), p.zero);
  }
  write_codes(
      l, keys.data(), [&](int, int c) { return params[static_cast<size_t>(c)]; },
      block.data() + l.k_codes_offset);
}

void quantize_values_block_ref(const Int4KiviLayout& l, std::span<const float> values,
                               std::span<std::byte> block) {
  check_input(l, values.size(), block.size());
  const int groups = l.num_value_groups();
  std::vector<Int4Params> params(static_cast<size_t>(l.block_size * groups));
  for (int t = 0; t < l.block_size; ++t) {
    for (int g = 0; g < groups; ++g) {
      const float* x = values.data() + t * l.head_dim + g * l.value_group_size;
      const Int4Params p = params_over(x, l.value_group_size, 1);
      const auto i = static_cast<size_t>(t * groups + g);
      params[i] = p;
      store_fp16(block.data() + l.v_scale_offset, i, p.scale);
      store_fp16(block.data() + l.v_zero_offset, i, p.zero);
    }
  }
  write_codes(
      l, values.data(),
      [&](int t, int c) {
        return params[static_cast<size_t>(t * groups + c / l.value_group_size)];
      },
      block.data() + l.v_codes_offset);
}

void quantize_block_ref(const Int4KiviLayout& l, std::span<const float> keys,
                        std::span<const float> values, std::span<std::byte> block) {
  quantize_keys_block_ref(l, keys, block);
  quantize_values_block_ref(l, values, block);
}

void dequantize_keys_block_ref(const Int4KiviLayout& l, std::span<const std::byte> block,
                               std::span<float> keys) {
  check_input(l, keys.size(), block.size());
  const std::byte* b = block.data();
  std::vector<WideParams> params(static_cast<size_t>(l.head_dim));
  for (size_t c = 0; c < params.size(); ++c) {
    params[c] = widen(load_params(b, l.k_scale_offset, l.k_zero_offset, c));
  }
  read_codes(
      l, b + l.k_codes_offset, [&](int, int c) { return params[static_cast<size_t>(c)]; },
      keys.data());
}

void dequantize_values_block_ref(const Int4KiviLayout& l, std::span<const std::byte> block,
                                 std::span<float> values) {
  check_input(l, values.size(), block.size());
  const std::byte* b = block.data();
  const int groups = l.num_value_groups();
  std::vector<WideParams> params(static_cast<size_t>(l.block_size * groups));
  for (size_t i = 0; i < params.size(); ++i) {
    params[i] = widen(load_params(b, l.v_scale_offset, l.v_zero_offset, i));
  }
  // Gv is a power of two (32, 64 or 128): the group of channel c is c >> shift.
  const int shift = std::countr_zero(static_cast<unsigned>(l.value_group_size));
  S4KV_CHECK(l.value_group_size == 1 << shift, "value group size ", l.value_group_size);
  read_codes(
      l, b + l.v_codes_offset,
      [&](int t, int c) { return params[static_cast<size_t>(t * groups + (c >> shift))]; },
      values.data());
}

}  // namespace s4kv::kv
