#include "backend/cpu/attention.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>
#include <vector>

#include "backend/cpu/gemm16.h"
#include "backend/cpu/gemm16_simd.h"
#include "backend/cpu/int4_attention.h"
#include "backend/cpu/paged_kv_cache.h"
#include "backend/cpu/thread_pool.h"
#include "common/check.h"
#include "kv/hadamard.h"
#include "kv/int4_kivi_layout.h"

namespace s4kv::backend::cpu {
namespace {

// Query tokens per work item: enough items for the threads on one long prefill, few enough
// that gathering the item's K/V (once per item) stays small against its dot products.
constexpr int64_t kQueryChunk = 32;

struct WorkItem {
  int64_t seq;
  int64_t kv_head;
  int64_t j_begin, j_end;  // new tokens [j_begin, j_end) of the sequence
};

// The reference's two inner loops, q.k over a run of keys and the values' weighted sum, each
// in a scalar form and an AVX2 form that performs the same operations in the same order
// (multiply, then add: no FMA), so that the result is bit for bit the same on every x86-64.
// Rows are fp32 (gathered) or 16-bit bits read in place from the paged cache (Row below), row
// p at rows + p * row_stride; a 16-bit element is widened exactly to fp32 first, so both give
// the same bits on the same values.
//
// dots: scores[p] = (q . keys[p]) * scale for p < n, each dot as eight partial sums (lane u
// takes elements u, u + 8, ...; head_dim % 8 == 0, checked) added as
// ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)).

// A row element type: T, one element widened (one) and eight (eight, AVX2).
// AVX-512 (pairs): eight elements of row a in lanes 0-7 and eight of row b in lanes 8-15, so
// that each 256-bit half is the AVX2 form's register for its row.
struct F32Row {
  using T = float;
  static float one(float x) { return x; }
  S4KV_AVX2 static __m256 eight(const float* p) { return _mm256_loadu_ps(p); }
  S4KV_AVX512 static __m512 pair(const float* a, const float* b) {
    return _mm512_castpd_ps(
        _mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(_mm256_loadu_ps(a))),
                           _mm256_castps_pd(_mm256_loadu_ps(b)), 1));
  }
  S4KV_AVX512 static __m512 sixteen(const float* p) { return _mm512_loadu_ps(p); }
};
template <bool BF16>
struct Half16Row {
  using T = uint16_t;
  static float one(uint16_t h) { return simd::widen1(h, BF16); }
  S4KV_AVX2 static __m256 eight(const uint16_t* p) { return simd::widen8<BF16>(p); }
  S4KV_AVX512 static __m512 pair(const uint16_t* a, const uint16_t* b) {
    const __m256i h = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)), 1);
    if constexpr (BF16) {
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    } else {
      return _mm512_cvtph_ps(h);
    }
  }
  S4KV_AVX512 static __m512 sixteen(const uint16_t* p) { return simd::widen16v<BF16>(p); }
};

template <class Row>
void dots_scalar(const float* q, const typename Row::T* keys, int64_t ks, int64_t n, int64_t d,
                 float scale, float* scores) {
  for (int64_t p = 0; p < n; ++p) {
    const typename Row::T* k = keys + p * ks;
    float acc[8] = {};
    for (int64_t i = 0; i < d; i += 8) {
      for (int u = 0; u < 8; ++u) acc[u] += q[i + u] * Row::one(k[i + u]);
    }
    scores[p] =
        (((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))) * scale;
  }
}

// AVX only (no FMA or F16C), so that the AVX-512 kernels inline it too.
__attribute__((target("avx2"))) inline float tree8(__m256 v) {
  const __m256 h = _mm256_hadd_ps(v, v);   // s0+s1, s2+s3, ., . | s4+s5, s6+s7, ., .
  const __m256 h2 = _mm256_hadd_ps(h, h);  // (s0+s1)+(s2+s3) | (s4+s5)+(s6+s7)
  return _mm_cvtss_f32(_mm_add_ss(_mm256_castps256_ps128(h2), _mm256_extractf128_ps(h2, 1)));
}

template <class Row>
S4KV_AVX2 void dots_avx2(const float* q, const typename Row::T* keys, int64_t ks, int64_t n,
                         int64_t d, float scale, float* scores) {
  int64_t p = 0;
  for (; p + 4 <= n; p += 4) {  // four keys per pass over q
    const typename Row::T* k = keys + p * ks;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t i = 0; i < d; i += 8) {
      const __m256 qv = _mm256_loadu_ps(q + i);
      a0 = _mm256_add_ps(a0, _mm256_mul_ps(qv, Row::eight(k + i)));
      a1 = _mm256_add_ps(a1, _mm256_mul_ps(qv, Row::eight(k + ks + i)));
      a2 = _mm256_add_ps(a2, _mm256_mul_ps(qv, Row::eight(k + 2 * ks + i)));
      a3 = _mm256_add_ps(a3, _mm256_mul_ps(qv, Row::eight(k + 3 * ks + i)));
    }
    scores[p] = tree8(a0) * scale;
    scores[p + 1] = tree8(a1) * scale;
    scores[p + 2] = tree8(a2) * scale;
    scores[p + 3] = tree8(a3) * scale;
  }
  for (; p < n; ++p) {
    const typename Row::T* k = keys + p * ks;
    __m256 a = _mm256_setzero_ps();
    for (int64_t i = 0; i < d; i += 8) {
      a = _mm256_add_ps(a, _mm256_mul_ps(_mm256_loadu_ps(q + i), Row::eight(k + i)));
    }
    scores[p] = tree8(a) * scale;
  }
}

// dots for up to 4 queries at once (prefill: up to 4 query tokens; decode: up to 4 heads of a
// group), each key row loaded once for them: scores[r * stride + p] = (qs[r] . keys[p]) * scale,
// p < n, r < nq; every dot the same operations in the same order as dots_avx2's, so the same
// bits.
template <class Row, int NQ>
S4KV_AVX2 void dotsq_avx2(const float* const* qs, const typename Row::T* keys, int64_t ks,
                          int64_t n, int64_t d, float scale, float* scores, int64_t stride) {
  int64_t p = 0;
  for (; p + 2 <= n; p += 2) {
    const typename Row::T* k0 = keys + p * ks;
    const typename Row::T* k1 = k0 + ks;
    __m256 a[NQ][2];
    for (int r = 0; r < NQ; ++r) a[r][0] = a[r][1] = _mm256_setzero_ps();
    for (int64_t i = 0; i < d; i += 8) {
      const __m256 kv0 = Row::eight(k0 + i);
      const __m256 kv1 = Row::eight(k1 + i);
      for (int r = 0; r < NQ; ++r) {
        const __m256 qv = _mm256_loadu_ps(qs[r] + i);
        a[r][0] = _mm256_add_ps(a[r][0], _mm256_mul_ps(qv, kv0));
        a[r][1] = _mm256_add_ps(a[r][1], _mm256_mul_ps(qv, kv1));
      }
    }
    for (int r = 0; r < NQ; ++r) {
      scores[r * stride + p] = tree8(a[r][0]) * scale;
      scores[r * stride + p + 1] = tree8(a[r][1]) * scale;
    }
  }
  for (; p < n; ++p) {
    for (int r = 0; r < NQ; ++r)
      dots_avx2<Row>(qs[r], keys + p * ks, ks, 1, d, scale, scores + r * stride + p);
  }
}

// Lanes 0-7 (h 0) or 8-15 (h 1) of v.
S4KV_AVX512 inline __m256 half256(__m512 v, int h) {
  return h == 0 ? _mm512_castps512_ps256(v)
                : _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
}

// The AVX-512 form: four keys a pass, two to a register (Row::pair), each 256-bit half summed
// exactly as dots_avx2 sums its key; the last n % 4 keys through dots_avx2.
template <class Row, int NQ>
S4KV_AVX512 void dotsq_avx512(const float* const* qs, const typename Row::T* keys, int64_t ks,
                              int64_t n, int64_t d, float scale, float* scores, int64_t stride) {
  int64_t p = 0;
  for (; p + 4 <= n; p += 4) {
    const typename Row::T* k0 = keys + p * ks;
    __m512 a[NQ][2];
    for (int r = 0; r < NQ; ++r) a[r][0] = a[r][1] = _mm512_setzero_ps();
    for (int64_t i = 0; i < d; i += 8) {
      const __m512 kv01 = Row::pair(k0 + i, k0 + ks + i);
      const __m512 kv23 = Row::pair(k0 + 2 * ks + i, k0 + 3 * ks + i);
      for (int r = 0; r < NQ; ++r) {
        const __m512 qv =
            _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(qs[r] + i))));
        a[r][0] = _mm512_add_ps(a[r][0], _mm512_mul_ps(qv, kv01));
        a[r][1] = _mm512_add_ps(a[r][1], _mm512_mul_ps(qv, kv23));
      }
    }
    for (int r = 0; r < NQ; ++r) {
      for (int k = 0; k < 4; ++k)
        scores[r * stride + p + k] = tree8(half256(a[r][k / 2], k % 2)) * scale;
    }
  }
  for (; p < n; ++p) {
    for (int r = 0; r < NQ; ++r)
      dots_avx2<Row>(qs[r], keys + p * ks, ks, 1, d, scale, scores + r * stride + p);
  }
}

template <class Row>
S4KV_AVX2 void dots4_avx2(const float* const* qs, int nq, const void* rows, int64_t ks, int64_t n,
                          int64_t d, float scale, float* scores, int64_t stride) {
  const auto* keys = static_cast<const typename Row::T*>(rows);
  switch (nq) {
    case 1:
      return dots_avx2<Row>(qs[0], keys, ks, n, d, scale, scores);
    case 2:
      return dotsq_avx2<Row, 2>(qs, keys, ks, n, d, scale, scores, stride);
    case 3:
      return dotsq_avx2<Row, 3>(qs, keys, ks, n, d, scale, scores, stride);
    default:
      return dotsq_avx2<Row, 4>(qs, keys, ks, n, d, scale, scores, stride);
  }
}

// The AVX-512 entry points end with vzeroupper themselves: their callers are plain SSE code,
// which would otherwise run with the upper halves dirty (measured: prompts 3.5x slower).
template <class Row>
S4KV_AVX512 void dots4_avx512(const float* const* qs, int nq, const void* rows, int64_t ks,
                              int64_t n, int64_t d, float scale, float* scores, int64_t stride) {
  const auto* keys = static_cast<const typename Row::T*>(rows);
  switch (nq) {
    case 1:
      dotsq_avx512<Row, 1>(qs, keys, ks, n, d, scale, scores, stride);
      break;
    case 2:
      dotsq_avx512<Row, 2>(qs, keys, ks, n, d, scale, scores, stride);
      break;
    case 3:
      dotsq_avx512<Row, 3>(qs, keys, ks, n, d, scale, scores, stride);
      break;
    default:
      dotsq_avx512<Row, 4>(qs, keys, ks, n, d, scale, scores, stride);
  }
  _mm256_zeroupper();
}

template <class Row>
void dots4_scalar(const float* const* qs, int nq, const void* rows, int64_t ks, int64_t n,
                  int64_t d, float scale, float* scores, int64_t stride) {
  const auto* keys = static_cast<const typename Row::T*>(rows);
  for (int r = 0; r < nq; ++r) dots_scalar<Row>(qs[r], keys, ks, n, d, scale, scores + r * stride);
}

// weighted_sum: o[i] += w[p] * values[p][i] for p in [p0, p1), p ascending (each o[i] the
// reference's sequential sum).
template <class Row>
void weighted_sum_scalar(const float* w, const void* rows, int64_t vs, int64_t p0, int64_t p1,
                         int64_t d, float* o) {
  const auto* values = static_cast<const typename Row::T*>(rows);
  for (int64_t p = p0; p < p1; ++p) {
    const typename Row::T* v = values + p * vs;
    for (int64_t i = 0; i < d; ++i) o[i] += w[p] * Row::one(v[i]);
  }
}

template <class Row>
S4KV_AVX2 void weighted_sum_avx2(const float* w, const void* rows, int64_t vs, int64_t p0,
                                 int64_t p1, int64_t d, float* o) {
  const auto* values = static_cast<const typename Row::T*>(rows);
  int64_t c = 0;
  for (; c + 64 <= d; c += 64) {  // 64 dims in 8 registers across all positions
    __m256 acc[8];
    for (int r = 0; r < 8; ++r) acc[r] = _mm256_loadu_ps(o + c + 8 * r);
    for (int64_t p = p0; p < p1; ++p) {
      const __m256 wp = _mm256_set1_ps(w[p]);
      const typename Row::T* v = values + p * vs + c;
      for (int r = 0; r < 8; ++r) {
        acc[r] = _mm256_add_ps(acc[r], _mm256_mul_ps(wp, Row::eight(v + 8 * r)));
      }
    }
    for (int r = 0; r < 8; ++r) _mm256_storeu_ps(o + c + 8 * r, acc[r]);
  }
  for (; c < d; c += 8) {
    __m256 acc = _mm256_loadu_ps(o + c);
    for (int64_t p = p0; p < p1; ++p) {
      acc =
          _mm256_add_ps(acc, _mm256_mul_ps(_mm256_set1_ps(w[p]), Row::eight(values + p * vs + c)));
    }
    _mm256_storeu_ps(o + c, acc);
  }
}

// weighted_sums: weighted_sum for nh <= 4 heads of a group at once over the same rows and
// positions (decode: the value rows loaded once for the heads): o[h][i] += w[h][p] * values[p][i],
// each o[h][i] the same sequential sum as weighted_sum's.
template <class Row>
void weighted_sums_scalar(const float* const* w, int nh, const void* rows, int64_t vs, int64_t p0,
                          int64_t p1, int64_t d, float* const* o) {
  for (int h = 0; h < nh; ++h) weighted_sum_scalar<Row>(w[h], rows, vs, p0, p1, d, o[h]);
}

template <class Row>
S4KV_AVX2 void weighted_sums_avx2(const float* const* w, int nh, const void* rows, int64_t vs,
                                  int64_t p0, int64_t p1, int64_t d, float* const* o) {
  for (int h = 0; h < nh; ++h) weighted_sum_avx2<Row>(w[h], rows, vs, p0, p1, d, o[h]);
}

// 64 dims of NH heads in 4 x NH registers across all positions, 16 dims to a register (lane i
// of a register is dim i's own sum, as in the AVX2 form); then 16 dims at a time.
template <class Row, int NH>
S4KV_AVX512 void weighted_sums_nh_avx512(const float* const* w, const typename Row::T* values,
                                         int64_t vs, int64_t p0, int64_t p1, int64_t d,
                                         float* const* o) {
  int64_t c = 0;
  for (; c + 64 <= d; c += 64) {
    __m512 acc[NH][4];
    for (int h = 0; h < NH; ++h) {
      for (int r = 0; r < 4; ++r) acc[h][r] = _mm512_loadu_ps(o[h] + c + 16 * r);
    }
    for (int64_t p = p0; p < p1; ++p) {
      const typename Row::T* v = values + p * vs + c;
      __m512 vv[4];
      for (int r = 0; r < 4; ++r) vv[r] = Row::sixteen(v + 16 * r);
      for (int h = 0; h < NH; ++h) {
        const __m512 wp = _mm512_set1_ps(w[h][p]);
        for (int r = 0; r < 4; ++r) acc[h][r] = _mm512_add_ps(acc[h][r], _mm512_mul_ps(wp, vv[r]));
      }
    }
    for (int h = 0; h < NH; ++h) {
      for (int r = 0; r < 4; ++r) _mm512_storeu_ps(o[h] + c + 16 * r, acc[h][r]);
    }
  }
  for (; c < d; c += 8) {  // head_dim % 8 == 0: the AVX2 form's tail
    for (int h = 0; h < NH; ++h) {
      __m256 acc = _mm256_loadu_ps(o[h] + c);
      for (int64_t p = p0; p < p1; ++p) {
        acc = _mm256_add_ps(
            acc, _mm256_mul_ps(_mm256_set1_ps(w[h][p]), Row::eight(values + p * vs + c)));
      }
      _mm256_storeu_ps(o[h] + c, acc);
    }
  }
}

template <class Row>
S4KV_AVX512 void weighted_sums_avx512(const float* const* w, int nh, const void* rows, int64_t vs,
                                      int64_t p0, int64_t p1, int64_t d, float* const* o) {
  const auto* values = static_cast<const typename Row::T*>(rows);
  switch (nh) {
    case 1:
      weighted_sums_nh_avx512<Row, 1>(w, values, vs, p0, p1, d, o);
      break;
    case 2:
      weighted_sums_nh_avx512<Row, 2>(w, values, vs, p0, p1, d, o);
      break;
    case 3:
      weighted_sums_nh_avx512<Row, 3>(w, values, vs, p0, p1, d, o);
      break;
    default:
      weighted_sums_nh_avx512<Row, 4>(w, values, vs, p0, p1, d, o);
  }
  _mm256_zeroupper();
}

// An instruction set's kernels over one row type; rows: const Row::T*.
struct Kernels {
  void (*dots4)(const float* const* qs, int nq, const void* rows, int64_t row_stride, int64_t n,
                int64_t d, float scale, float* scores, int64_t stride);
  void (*weighted_sums)(const float* const* w, int nh, const void* rows, int64_t row_stride,
                        int64_t p0, int64_t p1, int64_t d, float* const* o);
};

template <class Row>
Kernels kernels_of(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar:
      return {&dots4_scalar<Row>, &weighted_sums_scalar<Row>};
    case CpuIsa::kAvx2:
      return {&dots4_avx2<Row>, &weighted_sums_avx2<Row>};
    default:
      return {&dots4_avx512<Row>, &weighted_sums_avx512<Row>};
  }
}

// Rows of dtype (kF32: gathered rows; kBF16 / kF16: the paged 16-bit cache's).
Kernels kernels(CpuIsa isa, DType dtype) {
  S4KV_CHECK(cpu_supports(isa), "attention: this processor lacks ", cpu_isa_name(isa));
  switch (dtype) {
    case DType::kBF16:
      return kernels_of<Half16Row<true>>(isa);
    case DType::kF16:
      return kernels_of<Half16Row<false>>(isa);
    default:
      return kernels_of<F32Row>(isa);
  }
}

// Positions [c0, c1) in chunks of kAttentionChunk.
template <typename F>
void for_chunks(int64_t c0, int64_t c1, F&& f) {
  for (int64_t c = c0; c < c1; c += kAttentionChunk) f(c, std::min(c1, c + kAttentionChunk));
}

// The largest of x[0 .. n): eight running maxima (a vector max instead of one serial chain), the
// same value as one pass (a max does not depend on the order).
float max_of(const float* x, int64_t n) {
  float m[8];
  std::fill_n(m, 8, -INFINITY);
  int64_t p = 0;
  for (; p + 8 <= n; p += 8) {
    for (int u = 0; u < 8; ++u) m[u] = std::max(m[u], x[p + u]);
  }
  for (; p < n; ++p) m[0] = std::max(m[0], x[p]);
  for (int u = 1; u < 8; ++u) m[0] = std::max(m[0], m[u]);
  return m[0];
}

void run_item(const AttentionArgs& a, const KvGatherFn& gather, const KvInPlaceRun& in_place,
              const WorkItem& w) {
  const Int4BlockRun& run = in_place.int4;
  const Paged16BitRun& p16 = in_place.paged16;
  const int64_t d = a.head_dim;
  const int64_t q_begin = a.query_start_loc[w.seq];
  const int64_t q_len = a.query_start_loc[w.seq + 1] - q_begin;
  const int64_t seq_len = a.seq_lens[w.seq];
  const int64_t ctx_end = seq_len - q_len + w.j_end;  // positions the last query sees
  const int64_t group = a.num_heads / a.num_kv_heads;
  const int64_t nj = w.j_end - w.j_begin;
  const CpuIsa isa = a.isa.value_or(cpu_isa());
  const Kernels kf = kernels(isa, DType::kF32);
  const Kernels kp = p16.empty() ? kf : kernels(isa, p16.dtype);
  constexpr int64_t C = kAttentionChunk;
  S4KV_CHECK(
      p16.empty() || (run.empty() && (p16.dtype == DType::kBF16 || p16.dtype == DType::kF16)),
      "attention: a 16-bit run with an int4 run or of dtype ", dtype_name(p16.dtype));
  // Positions [i0, i1) are the int4 run's, read in place; the rest is gathered.
  const int64_t bs = run.empty() ? 0 : run.layout->block_size;
  const int64_t i0 = run.empty() ? 0 : run.first * bs, i1 = run.empty() ? 0 : run.end * bs;
  S4KV_CHECK(i0 >= 0 && i1 <= seq_len - q_len, "attention: int4 run [", i0, ", ", i1,
             ") past the step's start");

  // One chunk of keys or values at a time.
  thread_local std::vector<float> buf;
  buf.resize(static_cast<size_t>(C * d));
  // f(rows, row stride, kernels, p0, p1) over [c0, c1) cut at p0 < p1: position p's keys
  // (values) at rows + (p - p0) * row stride. Gathered into buf in one piece, or the 16-bit
  // cache's rows in place, a piece per block.
  auto for_rows = [&](int64_t c0, int64_t c1, bool keys, auto f) {
    if (p16.empty()) {
      const RotatedValues r = gather(w.seq, w.kv_head, c0, c1, keys ? buf.data() : nullptr,
                                     keys ? nullptr : buf.data());
      f(static_cast<const void*>(buf.data()), d, kf, c0, c1);
      return r;
    }
    const int64_t bs16 = p16.block_size;
    for (int64_t p0 = c0, p1; p0 < c1; p0 = p1) {
      p1 = std::min(c1, (p0 / bs16 + 1) * bs16);
      const int64_t slot = p16.table[p0 / bs16] * bs16 + p0 % bs16;
      f(static_cast<const void*>((keys ? p16.k : p16.v) + slot * p16.slot_elems), p16.slot_elems,
        kp, p0, p1);
    }
    return RotatedValues{};
  };
  // Scores of every (head of the group, query) over the item's context: row (h, j) at
  // ((h - first head) * nj + j - j_begin) * ctx_end.
  thread_local std::vector<float> scores;
  scores.resize(static_cast<size_t>(group * nj * ctx_end));
  auto sc_row = [&](int64_t hh, int64_t j) {
    return scores.data() + (hh * nj + (j - w.j_begin)) * ctx_end;
  };
  auto out_row = [&](int64_t hh, int64_t j) {
    return a.out.data() + (q_begin + j) * a.num_heads * d + (w.kv_head * group + hh) * d;
  };
  // The int4 run's operands, one row per (head, query): queries, then per block the score rows
  // (its weights in the values pass) and the outputs.
  thread_local std::vector<const float*> run_q;
  thread_local std::vector<float*> run_s, run_o;
  if (!run.empty()) {
    run_q.clear(), run_s.clear(), run_o.clear();
    for (int64_t hh = 0; hh < group; ++hh) {
      for (int64_t j = w.j_begin; j < w.j_end; ++j) {
        run_q.push_back(a.q.data() + (q_begin + j) * a.q_stride + (w.kv_head * group + hh) * d);
        run_s.push_back(nullptr);
        run_o.push_back(out_row(hh, j));
      }
    }
  }
  auto for_run_blocks = [&](auto f) {  // f(block bytes), run_s pointing at the block's scores
    for (int64_t i = run.first; i < run.end; ++i) {
      for (size_t r = 0; r < run_s.size(); ++r) {
        run_s[r] = sc_row(static_cast<int64_t>(r) / nj, w.j_begin + static_cast<int64_t>(r) % nj);
        run_s[r] += i * bs;
      }
      f(run.base + static_cast<size_t>(run.table[i]) * run.block_stride, i * bs);
    }
  };

  // Keys: the scores, chunk by chunk; the gather says where the rotated values are.
  RotatedValues rot{};
  if (!run.empty() && run.values_rotated) rot = {i0, i1};
  auto score_rows = [&](const void* rows, int64_t rs, const Kernels& k, int64_t p0, int64_t p1) {
    if (nj == 1) {  // one query token (decode): up to 4 heads of the group at once
      const int64_t ctx_max = std::min(p1, ctx_end);
      if (ctx_max <= p0) return;
      for (int64_t h0 = 0; h0 < group; h0 += 4) {
        const int nq = static_cast<int>(std::min<int64_t>(4, group - h0));
        const float* qs[4];
        for (int r4 = 0; r4 < nq; ++r4) {
          qs[r4] =
              a.q.data() + (q_begin + w.j_begin) * a.q_stride + (w.kv_head * group + h0 + r4) * d;
        }
        // Head h0 + r4's row is sc_row(h0, j) + r4 * ctx_end (nj == 1).
        k.dots4(qs, nq, rows, rs, ctx_max - p0, d, a.scale, sc_row(h0, w.j_begin) + p0, ctx_end);
      }
      return;
    }
    for (int64_t hh = 0; hh < group; ++hh) {
      const int64_t h = w.kv_head * group + hh;
      for (int64_t j0 = w.j_begin; j0 < w.j_end; j0 += 4) {
        // Up to 4 queries' scores at once, each over the keys the last of them sees (a query's
        // scores past its own context are computed and ignored).
        const int nq = static_cast<int>(std::min<int64_t>(4, w.j_end - j0));
        const int64_t ctx_max = std::min(p1, seq_len - q_len + j0 + nq);
        if (ctx_max <= p0) continue;
        const float* qs[4];
        for (int r4 = 0; r4 < nq; ++r4) {
          qs[r4] = a.q.data() + (q_begin + j0 + r4) * a.q_stride + h * d;
        }
        k.dots4(qs, nq, rows, rs, ctx_max - p0, d, a.scale, sc_row(hh, j0) + p0, ctx_end);
      }
    }
  };
  auto score_chunk = [&](int64_t c0, int64_t c1) {
    const RotatedValues r = for_rows(c0, c1, true, score_rows);
    S4KV_CHECK(r.begin <= r.end && (r.begin == r.end || (r.begin >= c0 && r.end <= c1)),
               "attention: rotated values [", r.begin, ", ", r.end, ") outside [", c0, ", ", c1,
               ")");
    if (r.begin < r.end) {
      S4KV_CHECK(rot.begin == rot.end || rot.end == r.begin,
                 "attention: rotated values in two runs");
      if (rot.begin == rot.end) rot.begin = r.begin;
      rot.end = r.end;
    }
  };
  for_chunks(0, i0, score_chunk);
  for_run_blocks([&](const std::byte* block, int64_t pos0) {
    int4_block_scores(isa, *run.layout, block, run.rope, pos0, run_q, a.scale, run_s);
  });
  for_chunks(i1, ctx_end, score_chunk);

  // Softmax per (head, query) over its own context.
  thread_local std::vector<float> inv_sums;
  inv_sums.resize(static_cast<size_t>(group * nj));
  for (int64_t hh = 0; hh < group; ++hh) {
    for (int64_t j = w.j_begin; j < w.j_end; ++j) {
      const int64_t ctx = seq_len - q_len + j + 1;
      float* sc = sc_row(hh, j);
      const float max_score = max_of(sc, ctx);
      float sum = 0.0f;
      for (int64_t p = 0; p < ctx; ++p) {
        sc[p] = std::exp(sc[p] - max_score);
        sum += sc[p];
      }
      inv_sums[static_cast<size_t>(hh * nj + j - w.j_begin)] = 1.0f / sum;
    }
  }

  // Values. Hadamard-domain values first: their weighted sum, rotated back once, starts each
  // output; then the plain values before and after them (all of them when there are none), each
  // sum in position order.
  for (int64_t hh = 0; hh < group; ++hh) {
    for (int64_t j = w.j_begin; j < w.j_end; ++j) std::fill_n(out_row(hh, j), d, 0.0f);
  }
  auto accumulate = [&](int64_t c0, int64_t c1, auto range_of) {
    // range_of(ctx) -> the part of [0, ctx) this pass sums, {p0, p1}. for_parts calls
    // f(p0, p1, j) for each query and part [p0, p1) of [s0, s1) it sums; every head of the group
    // sums the same parts.
    auto for_parts = [&](int64_t s0, int64_t s1, auto f) {
      for (int64_t j = w.j_begin; j < w.j_end; ++j) {
        for (const auto& [r0, r1] : range_of(seq_len - q_len + j + 1)) {
          const int64_t p0 = std::max(r0, s0), p1 = std::min(r1, s1);
          if (p0 < p1) f(p0, p1, j);
        }
      }
    };
    bool needed = false;
    for_parts(c0, c1, [&](int64_t, int64_t, int64_t) { needed = true; });
    if (!needed) return;
    for_rows(c0, c1, false,
             [&](const void* rows, int64_t rs, const Kernels& k, int64_t s0, int64_t s1) {
               for_parts(s0, s1, [&](int64_t p0, int64_t p1, int64_t j) {
                 for (int64_t h0 = 0; h0 < group; h0 += 4) {  // each value row once for 4 heads
                   const int nh = static_cast<int>(std::min<int64_t>(4, group - h0));
                   const float* ws[4];
                   float* os[4];
                   for (int r4 = 0; r4 < nh; ++r4) {
                     ws[r4] = sc_row(h0 + r4, j) + s0;
                     os[r4] = out_row(h0 + r4, j);
                   }
                   k.weighted_sums(ws, nh, rows, rs, p0 - s0, p1 - s0, d, os);
                 }
               });
             });
  };
  auto run_values = [&] {
    for_run_blocks([&](const std::byte* block, int64_t) {
      int4_block_values(isa, *run.layout, block,
                        std::span<const float* const>(run_s.data(), run_s.size()), run_o);
    });
  };
  using Runs = std::array<std::pair<int64_t, int64_t>, 2>;
  if (rot.begin < rot.end) {
    if (!run.empty() && run.values_rotated) {
      run_values();
    } else {
      for (int64_t c0 = rot.begin / C * C; c0 < rot.end; c0 += C) {
        accumulate(c0, std::min(ctx_end, c0 + C), [&](int64_t ctx) {
          return Runs{{{rot.begin, std::min(rot.end, ctx)}, {0, 0}}};
        });
      }
    }
    thread_local std::vector<float> o_rot;
    o_rot.resize(static_cast<size_t>(d));
    for (int64_t hh = 0; hh < group; ++hh) {
      for (int64_t j = w.j_begin; j < w.j_end; ++j) {
        float* o = out_row(hh, j);
        std::copy_n(o, d, o_rot.begin());
        kv::hadamard_ref(o_rot);
        std::copy_n(o_rot.begin(), d, o);
      }
    }
  }
  auto plain_chunk = [&](int64_t c0, int64_t c1) {
    accumulate(c0, c1, [&](int64_t ctx) {
      const int64_t rot_end = std::min(rot.end, ctx);
      const int64_t plain_end = rot.begin < rot_end ? rot.begin : ctx;
      return Runs{{{0, plain_end}, {std::max(plain_end, rot_end), ctx}}};
    });
  };
  for_chunks(0, i0, plain_chunk);
  if (!run.empty() && !run.values_rotated) run_values();
  for_chunks(i1, ctx_end, plain_chunk);
  for (int64_t hh = 0; hh < group; ++hh) {
    for (int64_t j = w.j_begin; j < w.j_end; ++j) {
      float* o = out_row(hh, j);
      const float inv_sum = inv_sums[static_cast<size_t>(hh * nj + j - w.j_begin)];
      for (int64_t i = 0; i < d; ++i) o[i] *= inv_sum;
    }
  }
}

}  // namespace

void context_attention_ref(const AttentionArgs& a, const KvGatherFn& gather, ThreadPool* pool) {
  context_attention(a, gather, KvInPlaceRunFn{}, pool);
}

void context_attention(const AttentionArgs& a, const KvGatherFn& gather,
                       const KvInPlaceRunFn& in_place, ThreadPool* pool) {
  const auto num_seqs = static_cast<int64_t>(a.seq_lens.size());
  S4KV_CHECK(static_cast<int64_t>(a.query_start_loc.size()) == num_seqs + 1,
             "context_attention: query_start_loc size");
  S4KV_CHECK(a.head_dim > 0 && a.head_dim % 8 == 0, "context_attention: head_dim ", a.head_dim);
  S4KV_CHECK(a.num_kv_heads > 0 && a.num_heads % a.num_kv_heads == 0,
             "context_attention: num_heads must be a multiple of num_kv_heads");
  const int64_t num_tokens = num_seqs == 0 ? 0 : a.query_start_loc[num_seqs];
  S4KV_CHECK(static_cast<int64_t>(a.out.size()) == num_tokens * a.num_heads * a.head_dim,
             "context_attention: out size");
  S4KV_CHECK(num_tokens == 0 || static_cast<int64_t>(a.q.size()) >=
                                    (num_tokens - 1) * a.q_stride + a.num_heads * a.head_dim,
             "context_attention: q too small");
  std::vector<WorkItem> items;
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int64_t q_len = a.query_start_loc[s + 1] - a.query_start_loc[s];
    S4KV_CHECK(q_len >= 0 && a.seq_lens[s] >= q_len, "context_attention: seq ", s);
    for (int64_t g = 0; g < a.num_kv_heads; ++g) {
      for (int64_t j = 0; j < q_len; j += kQueryChunk) {
        items.push_back({s, g, j, std::min(q_len, j + kQueryChunk)});
      }
    }
  }
  const auto run = [&](int64_t i) {
    const WorkItem& w = items[static_cast<size_t>(i)];
    run_item(a, gather, in_place ? in_place(w.seq, w.kv_head) : KvInPlaceRun{}, w);
  };
  if (pool != nullptr) {
    pool->parallel_for(static_cast<int64_t>(items.size()), run);
  } else {
    for (int64_t i = 0; i < static_cast<int64_t>(items.size()); ++i) run(i);
  }
}

void paged_attention_ref(const PagedAttentionArgs& a, ThreadPool* pool) {
  const auto num_seqs = static_cast<int64_t>(a.seq_lens.size());
  S4KV_CHECK(a.num_kv_heads > 0 && a.head_dim > 0 && a.block_size > 0,
             "paged_attention_ref: shape");
  const int64_t num_slots = static_cast<int64_t>(a.k_cache.size()) / (a.num_kv_heads * a.head_dim);
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int64_t num_blocks_used = (a.seq_lens[s] + a.block_size - 1) / a.block_size;
    S4KV_CHECK(num_blocks_used <= a.max_num_blocks_per_seq, "paged_attention_ref: block table");
    for (int64_t i = 0; i < num_blocks_used; ++i) {
      const int32_t block = a.block_tables[s * a.max_num_blocks_per_seq + i];
      S4KV_CHECK(block >= 0 && (block + 1) * a.block_size <= num_slots,
                 "paged_attention_ref: block id ", block);
    }
  }
  const AttentionArgs args{a.q,     a.q_stride,        a.num_heads, a.num_kv_heads, a.head_dim,
                           a.scale, a.query_start_loc, a.seq_lens,  a.out};
  const KvGatherFn gather = [&a](int64_t seq, int64_t kv_head, int64_t begin, int64_t end, float* k,
                                 float* v) {
    const int32_t* table = a.block_tables.data() + seq * a.max_num_blocks_per_seq;
    gather_paged_16bit(a.k_cache, a.v_cache, a.cache_dtype, a.block_size,
                       a.num_kv_heads * a.head_dim, table, kv_head * a.head_dim, a.head_dim, begin,
                       end, k, v);
    return RotatedValues{};
  };
  context_attention_ref(args, gather, pool);
}

}  // namespace s4kv::backend::cpu
