#include "backend/cpu/gemm16_packed.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/cpu/gemm16_simd.h"
#include "common/check.h"

namespace s4kv::backend::cpu {
namespace {

using simd::widen1;
using simd::widen16v;
using simd::widen8;

// k per block: a token tile holds kKc activations per token (8 tokens: 8 KB, in L1), a panel
// kKc x kNr widened weights.
constexpr int64_t kKc = 256;
// Outputs per block: the block's panels, kBlockOutputs x kKc fp32 (256 KB), stay in L2 while
// every token tile of the call passes over them. A multiple of every kernel's kNr.
constexpr int64_t kBlockOutputs = 256;
// The largest token tile of the kernels below.
constexpr int64_t kMaxMr = 8;

// The calling thread's block buffer: panels (kBlockOutputs x kKc floats) then the token tile
// (kMaxMr x kKc), 64-byte aligned. Grown on a thread's first call, then reused.
float* thread_buffer() {
  constexpr size_t kFloats = (kBlockOutputs + kMaxMr) * kKc;
  thread_local std::vector<float> buffer;
  if (buffer.empty()) buffer.resize(kFloats + 16);
  const auto misalign = reinterpret_cast<uintptr_t>(buffer.data()) % 64;
  return buffer.data() + (misalign == 0 ? 0 : (64 - misalign) / sizeof(float));
}

// Copies mr token rows of kc activations (row stride xs) to dst [mr_full][kKc]; rows mr..mr_full
// are zeros (their results are computed and dropped).
void copy_tokens(const float* x, int64_t xs, int64_t mr, int64_t kc, int64_t mr_full, float* dst) {
  const size_t bytes = static_cast<size_t>(kc) * sizeof(float);
  for (int64_t t = 0; t < mr; ++t) std::memcpy(dst + t * kKc, x + t * xs, bytes);
  for (int64_t t = mr; t < mr_full; ++t) std::memset(dst + t * kKc, 0, bytes);
}

// A kernel K provides, for its token tile kMr and panel width kNr:
//   pack(w, k, rows, kc, dst): dst[p * kNr + r] = w[r * k + p] widened, for p < kc and r < kNr,
//     zero for r >= rows (rows <= kNr);
//   tile(xt, panel, kc, c, cs, add): c[t * cs + j] = (add ? c[t * cs + j] : 0) +
//     sum_p xt[t * kKc + p] * panel[p * kNr + j], t < kMr, j < kNr: the products summed from
//     zero, then added to c (starting from c would round every product at the magnitude of c,
//     the residual stream under linear()'s accumulate).

// ---- scalar ---------------------------------------------------------------------------------

struct ScalarKernel {
  static constexpr int64_t kMr = 4, kNr = 16;

  template <bool BF16>
  static void pack(const uint16_t* w, int64_t k, int64_t rows, int64_t kc, float* dst) {
    for (int64_t r = 0; r < kNr; ++r) {
      for (int64_t p = 0; p < kc; ++p) dst[p * kNr + r] = r < rows ? widen1(w[r * k + p], BF16) : 0;
    }
  }

  static void tile(const float* xt, const float* panel, int64_t kc, float* c, int64_t cs,
                   bool add) {
    float acc[kMr][kNr] = {};
    for (int64_t p = 0; p < kc; ++p) {
      for (int64_t t = 0; t < kMr; ++t) {
        const float xv = xt[t * kKc + p];
        for (int64_t j = 0; j < kNr; ++j) acc[t][j] += xv * panel[p * kNr + j];
      }
    }
    for (int64_t t = 0; t < kMr; ++t) {
      for (int64_t j = 0; j < kNr; ++j) c[t * cs + j] = add ? c[t * cs + j] + acc[t][j] : acc[t][j];
    }
  }
};

// ---- AVX2 + FMA + F16C: 6 tokens x 16 outputs (12 accumulators of 16 ymm) --------------------

// v[i] = row i of an 8 x 8 block -> v[i] = column i.
S4KV_AVX2 inline void transpose8(__m256 (&v)[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(v[i], v[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(v[i], v[i + 1]);
  }
  // u[4g + q], 128-bit lane L: column 4L + q of rows 4g..4g+3.
  for (int g = 0; g < 2; ++g) {
    const __m256* a = t + 4 * g;
    u[4 * g] = _mm256_shuffle_ps(a[0], a[2], 0x44);
    u[4 * g + 1] = _mm256_shuffle_ps(a[0], a[2], 0xee);
    u[4 * g + 2] = _mm256_shuffle_ps(a[1], a[3], 0x44);
    u[4 * g + 3] = _mm256_shuffle_ps(a[1], a[3], 0xee);
  }
  for (int q = 0; q < 4; ++q) {
    v[q] = _mm256_permute2f128_ps(u[q], u[4 + q], 0x20);
    v[4 + q] = _mm256_permute2f128_ps(u[q], u[4 + q], 0x31);
  }
}

struct Avx2Kernel {
  static constexpr int64_t kMr = 6, kNr = 16;

  template <bool BF16>
  S4KV_AVX2 static void pack(const uint16_t* w, int64_t k, int64_t rows, int64_t kc, float* dst) {
    for (int64_t r0 = 0; r0 < kNr; r0 += 8) {
      const int64_t valid = std::clamp<int64_t>(rows - r0, 0, 8);
      int64_t p = 0;
      for (; p + 8 <= kc; p += 8) {
        __m256 v[8];
        for (int64_t i = 0; i < 8; ++i) {
          v[i] = i < valid ? widen8<BF16>(w + (r0 + i) * k + p) : _mm256_setzero_ps();
        }
        transpose8(v);
        for (int64_t i = 0; i < 8; ++i) _mm256_store_ps(dst + (p + i) * kNr + r0, v[i]);
      }
      for (; p < kc; ++p) {
        for (int64_t i = 0; i < 8; ++i) {
          dst[p * kNr + r0 + i] = i < valid ? widen1(w[(r0 + i) * k + p], BF16) : 0.0f;
        }
      }
    }
  }

  S4KV_AVX2 static void tile(const float* xt, const float* panel, int64_t kc, float* c, int64_t cs,
                             bool add) {
    constexpr int kNv = kNr / 8;
    __m256 acc[kMr][kNv];
#pragma GCC unroll 16
    for (int t = 0; t < kMr; ++t) {
#pragma GCC unroll 16
      for (int v = 0; v < kNv; ++v) acc[t][v] = _mm256_setzero_ps();
    }
    for (int64_t p = 0; p < kc; ++p) {
      __m256 wv[kNv];
#pragma GCC unroll 16
      for (int v = 0; v < kNv; ++v) wv[v] = _mm256_load_ps(panel + p * kNr + 8 * v);
#pragma GCC unroll 16
      for (int t = 0; t < kMr; ++t) {
        const __m256 xv = _mm256_broadcast_ss(xt + t * kKc + p);
#pragma GCC unroll 16
        for (int v = 0; v < kNv; ++v) acc[t][v] = _mm256_fmadd_ps(xv, wv[v], acc[t][v]);
      }
    }
#pragma GCC unroll 16
    for (int t = 0; t < kMr; ++t) {
#pragma GCC unroll 16
      for (int v = 0; v < kNv; ++v) {
        float* const cv = c + t * cs + 8 * v;
        _mm256_storeu_ps(cv, add ? _mm256_add_ps(_mm256_loadu_ps(cv), acc[t][v]) : acc[t][v]);
      }
    }
  }
};

// ---- AVX-512F: 8 tokens x 32 outputs (16 accumulators of 32 zmm) -----------------------------

// v[i] = row i of a 16 x 16 block -> v[i] = column i.
S4KV_AVX512 inline void transpose16(__m512 (&v)[16]) {
  __m512 t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(v[i], v[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(v[i], v[i + 1]);
  }
  // u[4g + q], 128-bit lane L: column 4L + q of rows 4g..4g+3.
  for (int g = 0; g < 4; ++g) {
    const __m512* a = t + 4 * g;
    u[4 * g] = _mm512_shuffle_ps(a[0], a[2], 0x44);
    u[4 * g + 1] = _mm512_shuffle_ps(a[0], a[2], 0xee);
    u[4 * g + 2] = _mm512_shuffle_ps(a[1], a[3], 0x44);
    u[4 * g + 3] = _mm512_shuffle_ps(a[1], a[3], 0xee);
  }
  // Column 4L + q gathers lane L of u[q], u[4 + q], u[8 + q], u[12 + q].
  for (int q = 0; q < 4; ++q) {
    const __m512 a0 = _mm512_shuffle_f32x4(u[q], u[4 + q], 0x44);
    const __m512 a1 = _mm512_shuffle_f32x4(u[q], u[4 + q], 0xee);
    const __m512 b0 = _mm512_shuffle_f32x4(u[8 + q], u[12 + q], 0x44);
    const __m512 b1 = _mm512_shuffle_f32x4(u[8 + q], u[12 + q], 0xee);
    v[q] = _mm512_shuffle_f32x4(a0, b0, 0x88);
    v[4 + q] = _mm512_shuffle_f32x4(a0, b0, 0xdd);
    v[8 + q] = _mm512_shuffle_f32x4(a1, b1, 0x88);
    v[12 + q] = _mm512_shuffle_f32x4(a1, b1, 0xdd);
  }
}

struct Avx512Kernel {
  static constexpr int64_t kMr = 8, kNr = 32;

  template <bool BF16>
  S4KV_AVX512 static void pack(const uint16_t* w, int64_t k, int64_t rows, int64_t kc, float* dst) {
    for (int64_t r0 = 0; r0 < kNr; r0 += 16) {
      const int64_t valid = std::clamp<int64_t>(rows - r0, 0, 16);
      int64_t p = 0;
      for (; p + 16 <= kc; p += 16) {
        __m512 v[16];
        for (int64_t i = 0; i < 16; ++i) {
          v[i] = i < valid ? widen16v<BF16>(w + (r0 + i) * k + p) : _mm512_setzero_ps();
        }
        transpose16(v);
        for (int64_t i = 0; i < 16; ++i) _mm512_store_ps(dst + (p + i) * kNr + r0, v[i]);
      }
      for (; p < kc; ++p) {
        for (int64_t i = 0; i < 16; ++i) {
          dst[p * kNr + r0 + i] = i < valid ? widen1(w[(r0 + i) * k + p], BF16) : 0.0f;
        }
      }
    }
  }

  S4KV_AVX512 static void tile(const float* xt, const float* panel, int64_t kc, float* c,
                               int64_t cs, bool add) {
    constexpr int kNv = kNr / 16;
    __m512 acc[kMr][kNv];
#pragma GCC unroll 16
    for (int t = 0; t < kMr; ++t) {
#pragma GCC unroll 16
      for (int v = 0; v < kNv; ++v) acc[t][v] = _mm512_setzero_ps();
    }
    for (int64_t p = 0; p < kc; ++p) {
      __m512 wv[kNv];
#pragma GCC unroll 16
      for (int v = 0; v < kNv; ++v) wv[v] = _mm512_load_ps(panel + p * kNr + 16 * v);
#pragma GCC unroll 16
      for (int t = 0; t < kMr; ++t) {
        const __m512 xv = _mm512_set1_ps(xt[t * kKc + p]);
#pragma GCC unroll 16
        for (int v = 0; v < kNv; ++v) acc[t][v] = _mm512_fmadd_ps(xv, wv[v], acc[t][v]);
      }
    }
#pragma GCC unroll 16
    for (int t = 0; t < kMr; ++t) {
#pragma GCC unroll 16
      for (int v = 0; v < kNv; ++v) {
        float* const cv = c + t * cs + 16 * v;
        _mm512_storeu_ps(cv, add ? _mm512_add_ps(_mm512_loadu_ps(cv), acc[t][v]) : acc[t][v]);
      }
    }
  }
};

// ---- the blocking, shared by the kernels ----------------------------------------------------

// Runs K's tile on the mr x nr corner of a full tile at c: through a scratch tile, so that the
// kernel never reads or writes outside the product.
template <class K>
void partial_tile(const float* xt, const float* panel, int64_t kc, float* c, int64_t cs, bool add,
                  int64_t mr, int64_t nr) {
  alignas(64) float part[K::kMr * K::kNr];
  const size_t row_bytes = static_cast<size_t>(nr) * sizeof(float);
  if (add) {
    for (int64_t t = 0; t < mr; ++t) std::memcpy(part + t * K::kNr, c + t * cs, row_bytes);
  }
  K::tile(xt, panel, kc, part, K::kNr, add);
  for (int64_t t = 0; t < mr; ++t) std::memcpy(c + t * cs, part + t * K::kNr, row_bytes);
}

template <class K, bool BF16>
void run_blocks(const float* x, int64_t xs, int64_t m, int64_t k, const uint16_t* w, int64_t n,
                float* out, int64_t os, bool accumulate) {
  static_assert(kBlockOutputs % K::kNr == 0 && K::kMr <= kMaxMr);
  float* const panels = thread_buffer();
  float* const tokens = panels + kBlockOutputs * kKc;
  for (int64_t n0 = 0; n0 < n; n0 += kBlockOutputs) {
    const int64_t nc = std::min(kBlockOutputs, n - n0);
    for (int64_t k0 = 0; k0 < k; k0 += kKc) {
      const int64_t kc = std::min(kKc, k - k0);
      // Panel j / kNr holds outputs n0 + j .. n0 + j + kNr at panels + j * kKc.
      for (int64_t j = 0; j < nc; j += K::kNr) {
        K::template pack<BF16>(w + (n0 + j) * k + k0, k, std::min(K::kNr, nc - j), kc,
                               panels + j * kKc);
      }
      const bool add = accumulate || k0 > 0;
      for (int64_t t0 = 0; t0 < m; t0 += K::kMr) {
        const int64_t mr = std::min(K::kMr, m - t0);
        copy_tokens(x + t0 * xs + k0, xs, mr, kc, K::kMr, tokens);
        for (int64_t j = 0; j < nc; j += K::kNr) {
          const int64_t nr = std::min(K::kNr, nc - j);
          float* const c = out + t0 * os + n0 + j;
          if (mr == K::kMr && nr == K::kNr) {
            K::tile(tokens, panels + j * kKc, kc, c, os, add);
          } else {
            partial_tile<K>(tokens, panels + j * kKc, kc, c, os, add, mr, nr);
          }
        }
      }
    }
  }
}

template <class K>
void run_dtype(bool bf16, const float* x, int64_t xs, int64_t m, int64_t k, const uint16_t* w,
               int64_t n, float* out, int64_t os, bool accumulate) {
  (bf16 ? run_blocks<K, true> : run_blocks<K, false>)(x, xs, m, k, w, n, out, os, accumulate);
}

}  // namespace

void gemm16_packed(CpuIsa isa, const float* x, int64_t x_stride, int64_t num_tokens, int64_t k_dim,
                   const uint16_t* w, bool bf16, int64_t num_out, float* out, int64_t out_stride,
                   bool accumulate) {
  S4KV_CHECK(cpu_supports(isa), "gemm16_packed: this processor lacks ", cpu_isa_name(isa));
  if (num_tokens <= 0 || num_out <= 0) return;
  if (k_dim <= 0) {  // empty sums: no block runs
    for (int64_t t = 0; t < num_tokens && !accumulate; ++t) {
      std::fill_n(out + t * out_stride, num_out, 0.0f);
    }
    return;
  }
  switch (isa) {
    case CpuIsa::kAvx512:
      run_dtype<Avx512Kernel>(bf16, x, x_stride, num_tokens, k_dim, w, num_out, out, out_stride,
                              accumulate);
      return;
    case CpuIsa::kAvx2:
      run_dtype<Avx2Kernel>(bf16, x, x_stride, num_tokens, k_dim, w, num_out, out, out_stride,
                            accumulate);
      return;
    default:
      run_dtype<ScalarKernel>(bf16, x, x_stride, num_tokens, k_dim, w, num_out, out, out_stride,
                              accumulate);
  }
}

}  // namespace s4kv::backend::cpu
