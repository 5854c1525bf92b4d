#include "backend/cpu/gemm16.h"

#include <array>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/cpu/gemm16_simd.h"
#include "common/check.h"

namespace s4kv::backend::cpu {
namespace {

using simd::widen1;
using simd::widen16v;
using simd::widen8;

// ---- scalar: the reference ------------------------------------------------------------------

void gemm16_scalar(const float* x, int64_t xs, int64_t m, int64_t k, const uint16_t* w, bool bf16,
                   int64_t n, float* out, int64_t os, bool accumulate) {
  for (int64_t t = 0; t < m; ++t) {
    for (int64_t j = 0; j < n; ++j) {
      float s = 0.0f;
      for (int64_t i = 0; i < k; ++i) s += x[t * xs + i] * widen1(w[j * k + i], bf16);
      out[t * os + j] = accumulate ? out[t * os + j] + s : s;
    }
  }
}

// ---- AVX2 + FMA + F16C: 8 lanes, tiles of MT tokens x NT weight rows ------------------------

S4KV_AVX2 inline float hsum8(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 s2 = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}

template <int MT, int NT, bool BF16>
S4KV_AVX2 void tile_avx2(const float* x, int64_t xs, int64_t k, const uint16_t* w, float* out,
                         int64_t os, bool accumulate) {
  __m256 acc[MT][NT];
#pragma GCC unroll 8
  for (int i = 0; i < MT; ++i) {
#pragma GCC unroll 8
    for (int j = 0; j < NT; ++j) acc[i][j] = _mm256_setzero_ps();
  }
  int64_t c = 0;
  for (; c + 8 <= k; c += 8) {
    __m256 wv[NT];
#pragma GCC unroll 8
    for (int j = 0; j < NT; ++j) wv[j] = widen8<BF16>(w + j * k + c);
#pragma GCC unroll 8
    for (int i = 0; i < MT; ++i) {
      const __m256 xv = _mm256_loadu_ps(x + i * xs + c);
#pragma GCC unroll 8
      for (int j = 0; j < NT; ++j) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  for (int i = 0; i < MT; ++i) {
    for (int j = 0; j < NT; ++j) {
      float s = hsum8(acc[i][j]);
      for (int64_t r = c; r < k; ++r) s += x[i * xs + r] * widen1(w[j * k + r], BF16);
      out[i * os + j] = accumulate ? out[i * os + j] + s : s;
    }
  }
}

// ---- AVX-512F: 16 lanes ---------------------------------------------------------------------

template <int MT, int NT, bool BF16>
S4KV_AVX512 void tile_avx512(const float* x, int64_t xs, int64_t k, const uint16_t* w, float* out,
                             int64_t os, bool accumulate) {
  __m512 acc[MT][NT];
#pragma GCC unroll 8
  for (int i = 0; i < MT; ++i) {
#pragma GCC unroll 8
    for (int j = 0; j < NT; ++j) acc[i][j] = _mm512_setzero_ps();
  }
  int64_t c = 0;
  for (; c + 16 <= k; c += 16) {
    __m512 wv[NT];
#pragma GCC unroll 8
    for (int j = 0; j < NT; ++j) {
      // The next tile's rows at the same columns, one line per 32 weights: the hardware
      // prefetcher alone leaves these short row streams waiting on memory (2-3x slower on a
      // matrix that fits L3, measured on s4kv-tiny's shapes).
      if ((c & 31) == 0) {
        _mm_prefetch(reinterpret_cast<const char*>(w + (j + NT) * k + c), _MM_HINT_T0);
      }
      wv[j] = widen16v<BF16>(w + j * k + c);
    }
#pragma GCC unroll 8
    for (int i = 0; i < MT; ++i) {
      const __m512 xv = _mm512_loadu_ps(x + i * xs + c);
#pragma GCC unroll 8
      for (int j = 0; j < NT; ++j) acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  for (int i = 0; i < MT; ++i) {
    for (int j = 0; j < NT; ++j) {
      float s = _mm512_reduce_add_ps(acc[i][j]);
      for (int64_t r = c; r < k; ++r) s += x[i * xs + r] * widen1(w[j * k + r], BF16);
      out[i * os + j] = accumulate ? out[i * os + j] + s : s;
    }
  }
}

// Tiles over the whole product: weight rows in groups of NT (then one by one), tokens in
// groups of MT (then the remainder), the weight tile reused from L1 across token groups.
using TileFn = void (*)(const float*, int64_t, int64_t, const uint16_t*, float*, int64_t, bool);

template <int MT, int NT, TileFn (*Pick)(int, int)>
void run_tiles(const float* x, int64_t xs, int64_t m, int64_t k, const uint16_t* w, int64_t n,
               float* out, int64_t os, bool accumulate) {
  int64_t j = 0;
  for (; j + NT <= n; j += NT) {
    for (int64_t t = 0; t < m; t += MT) {
      const int mt = static_cast<int>(m - t < MT ? m - t : MT);
      Pick(mt, NT)(x + t * xs, xs, k, w + j * k, out + t * os + j, os, accumulate);
    }
  }
  for (; j < n; ++j) {
    for (int64_t t = 0; t < m; t += MT) {
      const int mt = static_cast<int>(m - t < MT ? m - t : MT);
      Pick(mt, 1)(x + t * xs, xs, k, w + j * k, out + t * os + j, os, accumulate);
    }
  }
}

// AVX2 has 16 vector registers: 2 tokens x 4 rows (8 accumulators, 4 weights, 1 input).
template <bool BF16>
TileFn pick_avx2(int mt, int nt) {
  if (nt == 4) return mt == 2 ? &tile_avx2<2, 4, BF16> : &tile_avx2<1, 4, BF16>;
  return mt == 2 ? &tile_avx2<2, 1, BF16> : &tile_avx2<1, 1, BF16>;
}

// AVX-512 has 32: 4 tokens x 4 rows (16 accumulators, 4 weights, 1 input).
template <bool BF16>
TileFn pick_avx512(int mt, int nt) {
  if (nt == 4) {
    switch (mt) {
      case 4:
        return &tile_avx512<4, 4, BF16>;
      case 3:
        return &tile_avx512<3, 4, BF16>;
      case 2:
        return &tile_avx512<2, 4, BF16>;
      default:
        return &tile_avx512<1, 4, BF16>;
    }
  }
  switch (mt) {
    case 4:
      return &tile_avx512<4, 1, BF16>;
    case 3:
      return &tile_avx512<3, 1, BF16>;
    case 2:
      return &tile_avx512<2, 1, BF16>;
    default:
      return &tile_avx512<1, 1, BF16>;
  }
}

S4KV_AVX2 void widen_avx2(const uint16_t* src, bool bf16, int64_t n, float* dst) {
  int64_t i = 0;
  if (bf16) {
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, widen8<true>(src + i));
  } else {
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, widen8<false>(src + i));
  }
  for (; i < n; ++i) dst[i] = widen1(src[i], bf16);
}

S4KV_AVX512 void widen_avx512(const uint16_t* src, bool bf16, int64_t n, float* dst) {
  int64_t i = 0;
  if (bf16) {
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, widen16v<true>(src + i));
  } else {
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, widen16v<false>(src + i));
  }
  for (; i < n; ++i) dst[i] = widen1(src[i], bf16);
}

CpuIsa detect() {
  CpuIsa best = CpuIsa::kScalar;
  if (cpu_supports(CpuIsa::kAvx512)) {
    best = CpuIsa::kAvx512;
  } else if (cpu_supports(CpuIsa::kAvx2)) {
    best = CpuIsa::kAvx2;
  }
  const char* env = std::getenv("S4KV_CPU_ISA");
  if (env == nullptr) return best;
  const std::string want(env);
  CpuIsa asked = best;
  if (want == "scalar") asked = CpuIsa::kScalar;
  if (want == "avx2") asked = CpuIsa::kAvx2;
  return cpu_supports(asked) && asked < best ? asked : best;
}

}  // namespace

std::string_view cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAvx512:
      return "avx512";
    case CpuIsa::kAvx2:
      return "avx2";
    default:
      return "scalar";
  }
}

// Probed once: kernels check it on every call. AVX-512 counts only with AVX2 + FMA + F16C
// too (every such processor has them), so an avx512 choice may use the AVX2 kernels.
bool cpu_supports(CpuIsa isa) {
  static const std::array<bool, 3> supported = [] {
    __builtin_cpu_init();
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                      __builtin_cpu_supports("f16c");
    return std::array<bool, 3>{true, avx2, avx2 && __builtin_cpu_supports("avx512f")};
  }();
  return supported[static_cast<size_t>(isa)];
}

CpuIsa cpu_isa() {
  static const CpuIsa isa = detect();
  return isa;
}

void gemm16(CpuIsa isa, const float* x, int64_t x_stride, int64_t num_tokens, int64_t k_dim,
            const uint16_t* w, bool bf16, int64_t num_out, float* out, int64_t out_stride,
            bool accumulate) {
  S4KV_CHECK(cpu_supports(isa), "gemm16: this processor lacks ", cpu_isa_name(isa));
  if (num_tokens <= 0 || num_out <= 0) return;
  switch (isa) {
    case CpuIsa::kAvx512:
      (bf16 ? run_tiles<4, 4, &pick_avx512<true>>
            : run_tiles<4, 4, &pick_avx512<false>>)(x, x_stride, num_tokens, k_dim, w, num_out, out,
                                                    out_stride, accumulate);
      return;
    case CpuIsa::kAvx2:
      (bf16 ? run_tiles<2, 4, &pick_avx2<true>>
            : run_tiles<2, 4, &pick_avx2<false>>)(x, x_stride, num_tokens, k_dim, w, num_out, out,
                                                  out_stride, accumulate);
      return;
    default:
      gemm16_scalar(x, x_stride, num_tokens, k_dim, w, bf16, num_out, out, out_stride, accumulate);
  }
}

void widen16(CpuIsa isa, const uint16_t* src, bool bf16, int64_t n, float* dst) {
  S4KV_CHECK(cpu_supports(isa), "widen16: this processor lacks ", cpu_isa_name(isa));
  switch (isa) {
    case CpuIsa::kAvx512:
      widen_avx512(src, bf16, n, dst);
      return;
    case CpuIsa::kAvx2:
      widen_avx2(src, bf16, n, dst);
      return;
    default:
      for (int64_t i = 0; i < n; ++i) dst[i] = widen1(src[i], bf16);
  }
}

}  // namespace s4kv::backend::cpu
