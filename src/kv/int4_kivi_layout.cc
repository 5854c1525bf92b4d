#include "kv/int4_kivi_layout.h"

#include <cstring>
#include <string>

#include "kv/kv_format.h"

namespace s4kv::kv {

Result<Int4KiviLayout> Int4KiviLayout::create(int block_size, int head_dim, int value_group_size) {
  S4KV_RETURN_IF_ERROR(validate_kv_layout(block_size, value_group_size));
  if (head_dim <= 0 || head_dim % kInt4CodesPerWord != 0 || head_dim % value_group_size != 0) {
    return unsupported("unsupported head_dim=" + std::to_string(head_dim) +
                       " for int4_kivi (a positive multiple of 8 and of value_group_size=" +
                       std::to_string(value_group_size) + ")");
  }
  Int4KiviLayout l;
  l.block_size = block_size;
  l.head_dim = head_dim;
  l.value_group_size = value_group_size;
  const auto b = static_cast<size_t>(block_size);
  const auto d = static_cast<size_t>(head_dim);
  l.codes_bytes = b * d / 2;
  l.k_params_bytes = d * 2;
  l.v_params_bytes = b * (d / static_cast<size_t>(value_group_size)) * 2;
  l.k_codes_offset = 0;
  l.k_scale_offset = l.k_codes_offset + l.codes_bytes;
  l.k_zero_offset = l.k_scale_offset + l.k_params_bytes;
  l.v_codes_offset = l.k_zero_offset + l.k_params_bytes;
  l.v_scale_offset = l.v_codes_offset + l.codes_bytes;
  l.v_zero_offset = l.v_scale_offset + l.v_params_bytes;
  l.block_bytes = l.v_zero_offset + l.v_params_bytes;
  return l;
}

uint8_t read_int4_code(std::span<const std::byte> codes, int head_dim, int token, int channel) {
  S4KV_CHECK(token >= 0 && channel >= 0 && channel < head_dim, "token=", token,
             " channel=", channel, " head_dim=", head_dim);
  const size_t word = static_cast<size_t>(token) * static_cast<size_t>(head_dim / 8) +
                      static_cast<size_t>(channel / 8);
  S4KV_CHECK((word + 1) * 4 <= codes.size(), "code word ", word, " outside ", codes.size(),
             " bytes");
  uint32_t w;
  std::memcpy(&w, codes.data() + word * 4, 4);
  return unpack_int4x8(w)[static_cast<size_t>(channel % 8)];
}

uint16_t read_fp16(std::span<const std::byte> part, size_t index) {
  S4KV_CHECK((index + 1) * 2 <= part.size(), "fp16 index ", index, " outside ", part.size(),
             " bytes");
  uint16_t h;
  std::memcpy(&h, part.data() + index * 2, 2);
  return h;
}

}  // namespace s4kv::kv
