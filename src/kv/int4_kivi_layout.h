// The byte layout of one int4_kivi block: one layer, one KV head, B tokens (docs/kv-format.md
// has the diagram and the reasons). Owns the part offsets and the nibble order of the 4-bit
// codes; the arithmetic that fills a block lives in int4_kivi_ref.h. Where blocks sit in the
// pool (layer/head/block strides) is the block pool's business, not this file's.
//
// Parts, in this order, each starting at a multiple of 64 bytes (so a block aligned to 128
// bytes lets every part be read with 16-byte vector loads):
//   k_codes  [B][D/8] uint32, little-endian, 8 channels of one token per word (token-major)
//   k_scale  [D] fp16          one per channel, over the block's B tokens
//   k_zero   [D] fp16
//   v_codes  [B][D/8] uint32   same packing as k_codes
//   v_scale  [B][D/Gv] fp16    one per token per group of Gv channels (token-major)
//   v_zero   [B][D/Gv] fp16
// Nothing else: no header, no padding, so block_bytes == B * (D/2 + 4D/B + D/2 + 4D/Gv).
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>

#include "common/status.h"

namespace s4kv::kv {

static_assert(std::endian::native == std::endian::little,
              "int4_kivi code words are little-endian; the host and the GPU must be too");

inline constexpr int kInt4CodesPerWord = 8;

struct Int4KiviLayout {
  int block_size = 0;        // B: tokens per block (32, 64, 128)
  int head_dim = 0;          // D: channels per head (a multiple of 8 and of Gv; 128 served)
  int value_group_size = 0;  // Gv: value channels sharing one scale/zero (32, 64, 128)

  size_t k_codes_offset = 0;
  size_t k_scale_offset = 0;
  size_t k_zero_offset = 0;
  size_t v_codes_offset = 0;
  size_t v_scale_offset = 0;
  size_t v_zero_offset = 0;
  size_t codes_bytes = 0;     // B * D / 2, each of k_codes and v_codes
  size_t k_params_bytes = 0;  // D * 2, each of k_scale and k_zero
  size_t v_params_bytes = 0;  // B * (D / Gv) * 2, each of v_scale and v_zero
  size_t block_bytes = 0;

  // Refuses block sizes and value group sizes outside kv_format.h's sets, and head dims that are
  // not a positive multiple of 8 and of the group size, naming the value.
  static Result<Int4KiviLayout> create(int block_size, int head_dim, int value_group_size);

  int num_value_groups() const { return head_dim / value_group_size; }
  // Pool blocks (one of every KV head, as a block table entry takes) that hold one seat's 16-bit
  // residual ring of `ring` blocks: 2 (K, V) x ring x block_size rows of head_dim 16-bit values
  // a head, laid out in those blocks' bytes as [2][ring * block_size][num_kv_heads * head_dim].
  int ring_blocks(int ring) const {
    const size_t bytes = size_t{4} * ring * block_size * head_dim;
    return static_cast<int>((bytes + block_bytes - 1) / block_bytes);
  }
  int words_per_token() const { return head_dim / kInt4CodesPerWord; }
};

// Element j (0..7) of a code word lives in nibble int4_nibble_of(j) (bits 4n..4n+3), so the
// nibbles hold elements 0,2,4,6,1,3,5,7 from the least significant up. Then
// (word >> 4i) & 0x000f000f has element 2i in its low half and 2i+1 in its high half: one
// shift and one mask (a single LOP3 with the fp16 magic 0x6400) give a half2 pair per i.
constexpr int int4_nibble_of(int j) { return (j % 2) * 4 + j / 2; }

// Packs 8 codes (each 0..15, in channel order) into one word in the interleaved order.
constexpr uint32_t pack_int4x8(const std::array<uint8_t, 8>& q) {
  uint32_t w = 0;
  for (int j = 0; j < kInt4CodesPerWord; ++j) {
    w |= uint32_t{q[static_cast<size_t>(j)] & 0xfu} << (4 * int4_nibble_of(j));
  }
  return w;
}

// The inverse of pack_int4x8: the 8 codes of a word in channel order.
constexpr std::array<uint8_t, 8> unpack_int4x8(uint32_t w) {
  std::array<uint8_t, 8> q{};
  for (int j = 0; j < kInt4CodesPerWord; ++j) {
    q[static_cast<size_t>(j)] = static_cast<uint8_t>((w >> (4 * int4_nibble_of(j))) & 0xfu);
  }
  return q;
}

// The code of (token, channel) in a codes part (k_codes or v_codes): [B][D/8] words.
uint8_t read_int4_code(std::span<const std::byte> codes, int head_dim, int token, int channel);

// The fp16 bits at `index` of an fp16 part (k_scale, k_zero, v_scale, v_zero).
uint16_t read_fp16(std::span<const std::byte> part, size_t index);

}  // namespace s4kv::kv
