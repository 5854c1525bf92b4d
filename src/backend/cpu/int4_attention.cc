#include "backend/cpu/int4_attention.h"

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

// NR queries' sums over 16 channels (words w0, w0 + 1, one value group) of every position: each
// value vector dequantized once for the NR queries, the sums kept in registers.
template <int NR>
S4KV_AVX2 void values_tile_avx2(const kv::Int4KiviLayout& l, const std::byte* b, int w0,
                                const float* const* w, float* const* o) {
  const int words = l.words_per_token(), groups = l.num_value_groups();
  const int g = w0 * 8 / l.value_group_size;
  const std::byte* codes = b + l.v_codes_offset;
  __m256 acc[NR][2];
  for (int r = 0; r < NR; ++r) {
    acc[r][0] = _mm256_loadu_ps(o[r] + 8 * w0);
    acc[r][1] = _mm256_loadu_ps(o[r] + 8 * w0 + 8);
  }
  for (int t = 0; t < l.block_size; ++t) {
    const auto i = static_cast<size_t>(t * groups + g);
    const __m256 s = _mm256_set1_ps(fp16_to_float(load_fp16(b + l.v_scale_offset, i)));
    const __m256 z = _mm256_set1_ps(fp16_to_float(load_fp16(b + l.v_zero_offset, i)));
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

S4KV_AVX2 void values_avx2(const kv::Int4KiviLayout& l, const std::byte* b,
                           std::span<const float* const> w, std::span<float* const> o) {
  for (size_t r0 = 0; r0 < w.size(); r0 += 4) {
    const size_t nr = std::min<size_t>(4, w.size() - r0);
    for (int w0 = 0; w0 < l.words_per_token(); w0 += 2) {
      switch (nr) {
        case 1:
          values_tile_avx2<1>(l, b, w0, w.data() + r0, o.data() + r0);
          break;
        case 2:
          values_tile_avx2<2>(l, b, w0, w.data() + r0, o.data() + r0);
          break;
        case 3:
          values_tile_avx2<3>(l, b, w0, w.data() + r0, o.data() + r0);
          break;
        default:
          values_tile_avx2<4>(l, b, w0, w.data() + r0, o.data() + r0);
          break;
      }
    }
  }
}

// The AVX2 kernels need whole channel pairs of 8 (head_dim % 16) and two words per value group
// (value_group_size >= 16, always true of the allowed sizes).
bool use_avx2(CpuIsa isa, const kv::Int4KiviLayout& l) {
  S4KV_CHECK(cpu_supports(isa), "int4 attention: this processor lacks ", cpu_isa_name(isa));
  S4KV_CHECK(l.head_dim > 0 && l.head_dim <= kMaxD && l.head_dim % 8 == 0 &&
                 l.block_size % 4 == 0 && l.value_group_size % 8 == 0,
             "int4 attention: head_dim ", l.head_dim, ", block size ", l.block_size);
  return isa != CpuIsa::kScalar && l.head_dim % 16 == 0 && l.value_group_size % 16 == 0;
}

}  // namespace

void int4_block_scores(CpuIsa isa, const kv::Int4KiviLayout& layout, const std::byte* block,
                       const RopeTable* rope, int64_t pos0, std::span<const float* const> qs,
                       float scale, std::span<float* const> scores) {
  S4KV_CHECK(qs.size() == scores.size(), "int4_block_scores: ", qs.size(), " queries, ",
             scores.size(), " score rows");
  (use_avx2(isa, layout) ? scores_avx2 : scores_scalar)(layout, block, rope, pos0, qs, scale,
                                                        scores);
}

void int4_block_values(CpuIsa isa, const kv::Int4KiviLayout& layout, const std::byte* block,
                       std::span<const float* const> w, std::span<float* const> o) {
  S4KV_CHECK(w.size() == o.size(), "int4_block_values: ", w.size(), " weight rows, ", o.size(),
             " outputs");
  (use_avx2(isa, layout) ? values_avx2 : values_scalar)(layout, block, w, o);
}

}  // namespace s4kv::backend::cpu
