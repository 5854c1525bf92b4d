#include "backend/cpu/int4_attention.h"

// GCC 12's AVX-512 headers build "undefined" vectors by self-initialization, which
// -Wuninitialized reports inside every inlined intrinsic (as in gemm16_simd.h).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/int4_simd.h"
#include "common/check.h"
#include "common/half.h"
#include "kv/int4_kivi_ref.h"

namespace s4kv::backend::cpu {
namespace {

constexpr int kMaxD = kInt4AttentionMaxHeadDim;
// Value scale / zero pairs of a block: B * head_dim / Gv <= 128 * 256 / 32.
constexpr int kMaxParams = 128 * kMaxD / 32;

uint32_t load_word(const std::byte* codes, int words, int t, int w) {
  uint32_t word;
  std::memcpy(&word, codes + (static_cast<size_t>(t) * words + w) * 4, 4);
  return word;
}

uint16_t load_fp16(const std::byte* part, size_t i) {
  uint16_t h;
  std::memcpy(&h, part + i * 2, 2);
  return h;
}

// ---- Scalar: the reference -------------------------------------------------------------------

// attention.cc's dot: eight partial sums, lane u over elements u, u + 8, ..., added as a tree.
float dot8(const float* q, const float* k, int d) {
  float acc[8] = {};
  for (int i = 0; i < d; i += 8) {
    for (int u = 0; u < 8; ++u) acc[u] += q[i + u] * k[i + u];
  }
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

void scores_scalar(const kv::Int4KiviLayout& l, const std::byte* b, const RopeTable* rope,
                   int64_t pos0, std::span<const float* const> qs, float scale,
                   std::span<float* const> scores) {
  const int d = l.head_dim, words = l.words_per_token();
  float row[kMaxD];
  for (int t = 0; t < l.block_size; ++t) {
    for (int c = 0; c < d; ++c) {
      const uint32_t word = load_word(b + l.k_codes_offset, words, t, c / 8);
      const auto code = static_cast<uint8_t>((word >> (4 * kv::int4_nibble_of(c % 8))) & 0xfu);
      const kv::Int4Params p{load_fp16(b + l.k_scale_offset, static_cast<size_t>(c)),
                             load_fp16(b + l.k_zero_offset, static_cast<size_t>(c))};
      row[c] = kv::int4_dequant_ref(code, p);
    }
    if (rope != nullptr) {
      rope_rotate_isa(CpuIsa::kScalar, false, row, row, rope->cos(pos0 + t), rope->sin(pos0 + t),
                      d);
    }
    for (size_t r = 0; r < qs.size(); ++r) scores[r][t] = dot8(qs[r], row, d) * scale;
  }
}

void values_scalar(const kv::Int4KiviLayout& l, const std::byte* b, std::span<const float* const> w,
                   std::span<float* const> o) {
  const int d = l.head_dim, words = l.words_per_token(), groups = l.num_value_groups();
  float row[kMaxD];
  for (int t = 0; t < l.block_size; ++t) {
    for (int c = 0; c < d; ++c) {
      const uint32_t word = load_word(b + l.v_codes_offset, words, t, c / 8);
      const auto code = static_cast<uint8_t>((word >> (4 * kv::int4_nibble_of(c % 8))) & 0xfu);
      const auto i = static_cast<size_t>(t * groups + c / l.value_group_size);
      row[c] = kv::int4_dequant_ref(
          code, {load_fp16(b + l.v_scale_offset, i), load_fp16(b + l.v_zero_offset, i)});
    }
    for (size_t r = 0; r < w.size(); ++r) {
      for (int c = 0; c < d; ++c) o[r][c] += w[r][t] * row[c];
    }
  }
}

// ---- AVX2: the same operations on 8 lanes -------------------------------------------------

#define S4KV_AVX2 S4KV_INT4_AVX2
using simd::codes8;
using simd::fp16x8;

S4KV_AVX2 inline float tree8(__m256 v) {
  const __m256 h = _mm256_hadd_ps(v, v);   // s0+s1, s2+s3, ., . | s4+s5, s6+s7, ., .
  const __m256 h2 = _mm256_hadd_ps(h, h);  // (s0+s1)+(s2+s3) | (s4+s5)+(s6+s7)
  return _mm_cvtss_f32(_mm_add_ss(_mm256_castps256_ps128(h2), _mm256_extractf128_ps(h2, 1)));
}

// Four key rows at a time: each dequantized and rotated into L1 scratch (a channel pair's two
// words together), then every query's dots against the four, as attention.cc's dots_avx2.
S4KV_AVX2 void scores_avx2(const kv::Int4KiviLayout& l, const std::byte* b, const RopeTable* rope,
                           int64_t pos0, std::span<const float* const> qs, float scale,
                           std::span<float* const> scores) {
  const int d = l.head_dim, words = l.words_per_token(), half = d / 2;
  __m256 sc[kMaxD / 8], zr[kMaxD / 8];
  for (int w = 0; w < words; ++w) {
    sc[w] = fp16x8(b + l.k_scale_offset + static_cast<size_t>(w) * 16);
    zr[w] = fp16x8(b + l.k_zero_offset + static_cast<size_t>(w) * 16);
  }
  const std::byte* codes = b + l.k_codes_offset;
  alignas(32) float rows[4][kMaxD];
  for (int t0 = 0; t0 < l.block_size; t0 += 4) {
    for (int u = 0; u < 4; ++u) {
      const int t = t0 + u;
      float* row = rows[u];
      if (rope == nullptr) {
        for (int w = 0; w < words; ++w) {
          const __m256 x = _mm256_mul_ps(codes8(load_word(codes, words, t, w)), sc[w]);
          _mm256_store_ps(row + 8 * w, _mm256_add_ps(x, zr[w]));
        }
        continue;
      }
      const float* cs = rope->cos(pos0 + t);
      const float* sn = rope->sin(pos0 + t);
      for (int i = 0; i < half; i += 8) {
        const int w1 = i / 8, w2 = (half + i) / 8;
        const __m256 x1 =
            _mm256_add_ps(_mm256_mul_ps(codes8(load_word(codes, words, t, w1)), sc[w1]), zr[w1]);
        const __m256 x2 =
            _mm256_add_ps(_mm256_mul_ps(codes8(load_word(codes, words, t, w2)), sc[w2]), zr[w2]);
        const __m256 c = _mm256_loadu_ps(cs + i), s = _mm256_loadu_ps(sn + i);
        const __m256 a1 = _mm256_mul_ps(x1, c), b1 = _mm256_mul_ps(x2, s);
        const __m256 a2 = _mm256_mul_ps(x2, c), b2 = _mm256_mul_ps(x1, s);
        _mm256_store_ps(row + i, _mm256_sub_ps(a1, b1));
        _mm256_store_ps(row + half + i, _mm256_add_ps(a2, b2));
      }
    }
    for (size_t r = 0; r < qs.size(); ++r) {
      const float* q = qs[r];
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (int i = 0; i < d; i += 8) {
        const __m256 qv = _mm256_loadu_ps(q + i);
        a0 = _mm256_add_ps(a0, _mm256_mul_ps(qv, _mm256_load_ps(rows[0] + i)));
        a1 = _mm256_add_ps(a1, _mm256_mul_ps(qv, _mm256_load_ps(rows[1] + i)));
        a2 = _mm256_add_ps(a2, _mm256_mul_ps(qv, _mm256_load_ps(rows[2] + i)));
        a3 = _mm256_add_ps(a3, _mm256_mul_ps(qv, _mm256_load_ps(rows[3] + i)));
      }
      float* s = scores[r] + t0;
      s[0] = tree8(a0) * scale;
      s[1] = tree8(a1) * scale;
      s[2] = tree8(a2) * scale;
      s[3] = tree8(a3) * scale;
    }
  }
}

// A block's value scales and zeros widened once (F16C): [B * groups] fp32 each.
S4KV_AVX2 void value_params(const kv::Int4KiviLayout& l, const std::byte* b, float* vs, float* vz) {
  const int n = l.block_size * l.num_value_groups();  // a multiple of 8 (B >= 32)
  for (int i = 0; i < n; i += 8) {
    _mm256_store_ps(vs + i, fp16x8(b + l.v_scale_offset + static_cast<size_t>(i) * 2));
    _mm256_store_ps(vz + i, fp16x8(b + l.v_zero_offset + static_cast<size_t>(i) * 2));
  }
}

// NR queries' sums over 16 channels (words w0, w0 + 1, one value group) of every position: each
// value vector dequantized once for the NR queries, the sums kept in registers.
template <int NR>
S4KV_AVX2 void values_tile_avx2(const kv::Int4KiviLayout& l, const std::byte* b, const float* vs,
                                const float* vz, int w0, const float* const* w, float* const* o) {
  const int words = l.words_per_token(), groups = l.num_value_groups();
  const int g = w0 * 8 / l.value_group_size;
  const std::byte* codes = b + l.v_codes_offset;
  __m256 acc[NR][2];
  for (int r = 0; r < NR; ++r) {
    acc[r][0] = _mm256_loadu_ps(o[r] + 8 * w0);
    acc[r][1] = _mm256_loadu_ps(o[r] + 8 * w0 + 8);
  }
  for (int t = 0; t < l.block_size; ++t) {
    const __m256 s = _mm256_set1_ps(vs[t * groups + g]);
    const __m256 z = _mm256_set1_ps(vz[t * groups + g]);
    const __m256 v0 = _mm256_add_ps(_mm256_mul_ps(codes8(load_word(codes, words, t, w0)), s), z);
    const __m256 v1 =
        _mm256_add_ps(_mm256_mul_ps(codes8(load_word(codes, words, t, w0 + 1)), s), z);
    for (int r = 0; r < NR; ++r) {
      const __m256 wt = _mm256_set1_ps(w[r][t]);
      acc[r][0] = _mm256_add_ps(acc[r][0], _mm256_mul_ps(wt, v0));
      acc[r][1] = _mm256_add_ps(acc[r][1], _mm256_mul_ps(wt, v1));
    }
  }
  for (int r = 0; r < NR; ++r) {
    _mm256_storeu_ps(o[r] + 8 * w0, acc[r][0]);
    _mm256_storeu_ps(o[r] + 8 * w0 + 8, acc[r][1]);
  }
}

// An instruction set's value tiles (Tiles::run<NR>: NR <= 4 weight rows, kWords code words from
// w0) over every row and word of a block, with the block's value scales and zeros.
template <class Tiles, int kWords>
void values_by_tiles(const kv::Int4KiviLayout& l, const std::byte* b,
                     std::span<const float* const> w, std::span<float* const> o) {
  alignas(32) float vs[kMaxParams], vz[kMaxParams];
  value_params(l, b, vs, vz);
  for (size_t r0 = 0; r0 < w.size(); r0 += 4) {
    const size_t nr = std::min<size_t>(4, w.size() - r0);
    const float* const* wr = w.data() + r0;
    float* const* orow = o.data() + r0;
    for (int w0 = 0; w0 < l.words_per_token(); w0 += kWords) {
      switch (nr) {
        case 1:
          Tiles::template run<1>(l, b, vs, vz, w0, wr, orow);
          break;
        case 2:
          Tiles::template run<2>(l, b, vs, vz, w0, wr, orow);
          break;
        case 3:
          Tiles::template run<3>(l, b, vs, vz, w0, wr, orow);
          break;
        default:
          Tiles::template run<4>(l, b, vs, vz, w0, wr, orow);
          break;
      }
    }
  }
}

struct Avx2Tiles {
  template <int NR>
  static void run(const kv::Int4KiviLayout& l, const std::byte* b, const float* vs, const float* vz,
                  int w0, const float* const* w, float* const* o) {
    values_tile_avx2<NR>(l, b, vs, vz, w0, w, o);
  }
};

S4KV_AVX2 void values_avx2(const kv::Int4KiviLayout& l, const std::byte* b,
                           std::span<const float* const> w, std::span<float* const> o) {
  values_by_tiles<Avx2Tiles, 2>(l, b, w, o);
}

// ---- AVX-512: two key rows per register, 16 value channels per register -----------------
//
// The dot products keep attention.cc's eight partial sums: a 512-bit register holds the same
// eight lanes of two positions (keys) side by side, so each half sums exactly what an AVX2
// register sums. Dequantization, rotation and the values' sums are per element anyway.

#define S4KV_AVX512 __attribute__((target("avx512f,avx2,f16c")))

// The codes as floats, 0 .. 15: a lane's low 4 bits pick from this (vpermps), exact.
S4KV_AVX512 inline __m512 code_values() {
  return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}

// Lanes 0-7: the codes of word w of row t; lanes 8-15: those of row t2.
S4KV_AVX512 inline __m512 codes16(uint32_t lo, uint32_t hi) {
  const __m512i shifts =
      _mm512_setr_epi32(0, 16, 4, 20, 8, 24, 12, 28, 0, 16, 4, 20, 8, 24, 12, 28);
  const __m512i wv =
      _mm512_mask_set1_epi32(_mm512_set1_epi32(static_cast<int>(lo)), 0xff00, static_cast<int>(hi));
  return _mm512_permutexvar_ps(_mm512_srlv_epi32(wv, shifts), code_values());
}

// Words w and w + 1 of a row (p: word w): lane 2m holds channel 8w + m's code in its low 4
// bits, lane 2m + 1 channel 8w + 8 + m's (the bits above are other codes).
S4KV_AVX512 inline __m512i code_pairs(const std::byte* p) {
  uint64_t x;
  std::memcpy(&x, p, 8);
  const __m512i shifts =
      _mm512_setr_epi32(0, 0, 16, 16, 4, 4, 20, 20, 8, 8, 24, 24, 12, 12, 28, 28);
  return _mm512_srlv_epi32(_mm512_set1_epi64(static_cast<long long>(x)), shifts);
}

// 8 floats from lo in lanes 0-7, 8 from hi in lanes 8-15.
S4KV_AVX512 inline __m512 pair8(const float* lo, const float* hi) {
  const __m512d l = _mm512_castpd256_pd512(_mm256_castps_pd(_mm256_loadu_ps(lo)));
  return _mm512_castpd_ps(_mm512_insertf64x4(l, _mm256_castps_pd(_mm256_loadu_ps(hi)), 1));
}

S4KV_AVX512 inline __m512 dup8(__m256 x) {
  return _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(x)));
}

// Per 128-bit lane: a0 + a1, a2 + a3, b0 + b1, b2 + b3.
S4KV_AVX512 inline __m512 pairs(__m512 a, __m512 b) {
  return _mm512_add_ps(_mm512_shuffle_ps(a, b, 0x88), _mm512_shuffle_ps(a, b, 0xdd));
}

// The dot products of query q with the eight key rows of rows[p][w]
// (positions lo = p, hi = p + 4 of the pass: lanes 0-7 and 8-15), each as attention.cc's eight
// partial sums in channel order, then its tree ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
// made for the eight positions together: two rounds of even + odd lanes within 128-bit lanes,
// then the halves of each position's sums. out[k] = sum(position k) * scale, k < 8 (the
// positions in order: the low halves' sums come out first).
template <int kWords>
S4KV_AVX512 inline void dots8(const float* q, const __m512 (*rows)[kMaxD / 8], int words,
                              float scale, float* out) {
  __m512 acc[4];
  for (int p = 0; p < 4; ++p) acc[p] = _mm512_setzero_ps();
  const int n = kWords > 0 ? kWords : words;
#pragma GCC unroll 16
  for (int w = 0; w < n; ++w) {
    const __m512 qv = dup8(_mm256_loadu_ps(q + 8 * w));
    for (int p = 0; p < 4; ++p) acc[p] = _mm512_add_ps(acc[p], _mm512_mul_ps(qv, rows[p][w]));
  }
  // Per 128-bit lane k: the four rows' (lanes 4k % 8 .. + 3) partial trees, rows 0..3.
  const __m512 h = pairs(pairs(acc[0], acc[1]), pairs(acc[2], acc[3]));
  const __m512 lo = _mm512_shuffle_f32x4(h, h, 0x88);  // 128-bit lanes 0, 2: s0..s3 halves
  const __m512 hi = _mm512_shuffle_f32x4(h, h, 0xdd);  // lanes 1, 3: s4..s7 halves
  const __m256 sums = _mm256_add_ps(_mm512_castps512_ps256(lo), _mm512_castps512_ps256(hi));
  _mm256_storeu_ps(out, _mm256_mul_ps(sums, _mm256_set1_ps(scale)));
}

// Channels 8w .. 8w + 7 of the key rows at r0 (lanes 0-7) and r1 (8-15), pre-RoPE, dequantized.
S4KV_AVX512 inline __m512 key_rows(const std::byte* r0, const std::byte* r1, int w, __m512 sc,
                                   __m512 zr) {
  uint32_t lo, hi;
  std::memcpy(&lo, r0 + 4 * w, 4);
  std::memcpy(&hi, r1 + 4 * w, 4);
  return _mm512_add_ps(_mm512_mul_ps(codes16(lo, hi), sc), zr);
}

// Eight positions a pass: rows[p] holds positions t0 + p (low half) and t0 + 4 + p (high half),
// each dequantized and rotated (the reference's roundings, element by element), then every
// query's eight scores at once. kWords: 16 (head_dim 128, every loop unrolled) or 0 (any).
template <int kWords>
S4KV_AVX512 void scores_avx512_t(const kv::Int4KiviLayout& l, const std::byte* b,
                                 const RopeTable* rope, int64_t pos0,
                                 std::span<const float* const> qs, float scale,
                                 std::span<float* const> scores) {
  const int words = kWords > 0 ? kWords : l.words_per_token(), half = 4 * words;
  __m512 sc[kMaxD / 8], zr[kMaxD / 8];
  for (int w = 0; w < words; ++w) {
    sc[w] = dup8(fp16x8(b + l.k_scale_offset + static_cast<size_t>(w) * 16));
    zr[w] = dup8(fp16x8(b + l.k_zero_offset + static_cast<size_t>(w) * 16));
  }
  const std::byte* codes = b + l.k_codes_offset;
  const size_t row_bytes = static_cast<size_t>(words) * 4;
  __m512 rows[4][kMaxD / 8];
  for (int t0 = 0; t0 < l.block_size; t0 += 8) {
    for (int p = 0; p < 4; ++p) {
      const std::byte* r0 = codes + static_cast<size_t>(t0 + p) * row_bytes;
      const std::byte* r1 = r0 + 4 * row_bytes;
      if (rope == nullptr) {
#pragma GCC unroll 16
        for (int w = 0; w < words; ++w) rows[p][w] = key_rows(r0, r1, w, sc[w], zr[w]);
        continue;
      }
      const int64_t p_lo = pos0 + t0 + p, p_hi = p_lo + 4;
      const float *c0 = rope->cos(p_lo), *c1 = rope->cos(p_hi);
      const float *s0 = rope->sin(p_lo), *s1 = rope->sin(p_hi);
#pragma GCC unroll 16
      for (int i = 0; i < half; i += 8) {
        const int w1 = i / 8, w2 = (half + i) / 8;
        const __m512 x1 = key_rows(r0, r1, w1, sc[w1], zr[w1]);
        const __m512 x2 = key_rows(r0, r1, w2, sc[w2], zr[w2]);
        const __m512 c = pair8(c0 + i, c1 + i), s = pair8(s0 + i, s1 + i);
        rows[p][w1] = _mm512_sub_ps(_mm512_mul_ps(x1, c), _mm512_mul_ps(x2, s));
        rows[p][w2] = _mm512_add_ps(_mm512_mul_ps(x2, c), _mm512_mul_ps(x1, s));
      }
    }
    for (size_t r = 0; r < qs.size(); ++r) dots8<kWords>(qs[r], rows, words, scale, scores[r] + t0);
  }
}

S4KV_AVX512 void scores_avx512(const kv::Int4KiviLayout& l, const std::byte* b,
                               const RopeTable* rope, int64_t pos0,
                               std::span<const float* const> qs, float scale,
                               std::span<float* const> scores) {
  if (l.words_per_token() == 16) {
    scores_avx512_t<16>(l, b, rope, pos0, qs, scale, scores);
  } else {
    scores_avx512_t<0>(l, b, rope, pos0, qs, scale, scores);
  }
}

// NR queries' sums over 32 channels (words w0 .. w0 + 3, one value group) of every position.
// A position's 16 values of the group (code * scale + zero for codes 0 .. 15, the reference's
// roundings) are a table its codes pick from; the sums are kept in code_pairs' lane order.
template <int NR>
S4KV_AVX512 void values_tile_avx512(const kv::Int4KiviLayout& l, const std::byte* b,
                                    const float* vs, const float* vz, int w0, const float* const* w,
                                    float* const* o) {
  const int groups = l.num_value_groups();
  const size_t row_bytes = static_cast<size_t>(l.words_per_token()) * 4;
  const int g = w0 * 8 / l.value_group_size;
  const std::byte* codes = b + l.v_codes_offset + static_cast<size_t>(w0) * 4;
  // Lane k of a sum <- channel to_lanes[k] of its 16; channel c <- lane to_channels[c].
  const __m512i to_lanes = _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
  const __m512i to_channels =
      _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  const __m512 iota = code_values();
  __m512 acc[NR][2];
  for (int r = 0; r < NR; ++r) {
    acc[r][0] = _mm512_permutexvar_ps(to_lanes, _mm512_loadu_ps(o[r] + 8 * w0));
    acc[r][1] = _mm512_permutexvar_ps(to_lanes, _mm512_loadu_ps(o[r] + 8 * w0 + 16));
  }
  for (int t = 0; t < l.block_size; ++t) {
    const __m512 table = _mm512_add_ps(_mm512_mul_ps(iota, _mm512_set1_ps(vs[t * groups + g])),
                                       _mm512_set1_ps(vz[t * groups + g]));
    const std::byte* row = codes + static_cast<size_t>(t) * row_bytes;
    const __m512 v0 = _mm512_permutexvar_ps(code_pairs(row), table);
    const __m512 v1 = _mm512_permutexvar_ps(code_pairs(row + 8), table);
    for (int r = 0; r < NR; ++r) {
      const __m512 wt = _mm512_set1_ps(w[r][t]);
      acc[r][0] = _mm512_add_ps(acc[r][0], _mm512_mul_ps(wt, v0));
      acc[r][1] = _mm512_add_ps(acc[r][1], _mm512_mul_ps(wt, v1));
    }
  }
  for (int r = 0; r < NR; ++r) {
    _mm512_storeu_ps(o[r] + 8 * w0, _mm512_permutexvar_ps(to_channels, acc[r][0]));
    _mm512_storeu_ps(o[r] + 8 * w0 + 16, _mm512_permutexvar_ps(to_channels, acc[r][1]));
  }
}

struct Avx512Tiles {
  template <int NR>
  static void run(const kv::Int4KiviLayout& l, const std::byte* b, const float* vs, const float* vz,
                  int w0, const float* const* w, float* const* o) {
    values_tile_avx512<NR>(l, b, vs, vz, w0, w, o);
  }
};

S4KV_AVX512 void values_avx512(const kv::Int4KiviLayout& l, const std::byte* b,
                               std::span<const float* const> w, std::span<float* const> o) {
  values_by_tiles<Avx512Tiles, 4>(l, b, w, o);
}

// The vector kernels need whole channel pairs of 8 (head_dim % 16) and, for AVX-512, four
// words of a value group per pass (head_dim % 32; every allowed Gv is a multiple of 32).
CpuIsa kernel_isa(CpuIsa isa, const kv::Int4KiviLayout& l) {
  S4KV_CHECK(cpu_supports(isa), "int4 attention: this processor lacks ", cpu_isa_name(isa));
  S4KV_CHECK(l.head_dim > 0 && l.head_dim <= kMaxD && l.head_dim % 8 == 0 &&
                 l.block_size % 8 == 0 && l.value_group_size % 8 == 0 &&
                 l.block_size * l.num_value_groups() <= kMaxParams,
             "int4 attention: head_dim ", l.head_dim, ", block size ", l.block_size);
  if (isa == CpuIsa::kAvx512 && l.head_dim % 32 == 0 && l.value_group_size % 32 == 0) {
    return CpuIsa::kAvx512;
  }
  if (isa != CpuIsa::kScalar && l.head_dim % 16 == 0 && l.value_group_size % 16 == 0) {
    return CpuIsa::kAvx2;
  }
  return CpuIsa::kScalar;
}

}  // namespace

void int4_block_scores(CpuIsa isa, const kv::Int4KiviLayout& layout, const std::byte* block,
                       const RopeTable* rope, int64_t pos0, std::span<const float* const> qs,
                       float scale, std::span<float* const> scores) {
  S4KV_CHECK(qs.size() == scores.size(), "int4_block_scores: ", qs.size(), " queries, ",
             scores.size(), " score rows");
  switch (kernel_isa(isa, layout)) {
    case CpuIsa::kAvx512:
      scores_avx512(layout, block, rope, pos0, qs, scale, scores);
      break;
    case CpuIsa::kAvx2:
      scores_avx2(layout, block, rope, pos0, qs, scale, scores);
      break;
    case CpuIsa::kScalar:
      scores_scalar(layout, block, rope, pos0, qs, scale, scores);
      break;
  }
}

void int4_block_values(CpuIsa isa, const kv::Int4KiviLayout& layout, const std::byte* block,
                       std::span<const float* const> w, std::span<float* const> o) {
  S4KV_CHECK(w.size() == o.size(), "int4_block_values: ", w.size(), " weight rows, ", o.size(),
             " outputs");
  switch (kernel_isa(isa, layout)) {
    case CpuIsa::kAvx512:
      values_avx512(layout, block, w, o);
      break;
    case CpuIsa::kAvx2:
      values_avx2(layout, block, w, o);
      break;
    case CpuIsa::kScalar:
      values_scalar(layout, block, w, o);
      break;
  }
}

}  // namespace s4kv::backend::cpu
