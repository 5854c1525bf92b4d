#include "backend/rope_table.h"

#include <immintrin.h>

#include <cmath>

#include "backend/cpu/gemm16.h"
#include "common/check.h"

namespace s4kv::backend {

namespace {
constexpr int64_t kRowsGranule = 1024;
}  // namespace

RopeTable::RopeTable(std::span<const float> inv_freq)
    : inv_freq_(inv_freq.begin(), inv_freq.end()), half_(static_cast<int64_t>(inv_freq.size())) {
  S4KV_CHECK(half_ > 0, "RopeTable: empty inv_freq");
}

void RopeTable::ensure(int64_t num_positions) {
  if (num_positions <= num_positions_) return;
  const int64_t rows = (num_positions + kRowsGranule - 1) / kRowsGranule * kRowsGranule;
  cos_.resize(static_cast<size_t>(rows * half_));
  sin_.resize(static_cast<size_t>(rows * half_));
  for (int64_t pos = num_positions_; pos < rows; ++pos) {
    const auto p = static_cast<float>(pos);
    for (int64_t i = 0; i < half_; ++i) {
      const float angle = inv_freq_[static_cast<size_t>(i)] * p;
      cos_[static_cast<size_t>(pos * half_ + i)] = static_cast<float>(std::cos(double{angle}));
      sin_[static_cast<size_t>(pos * half_ + i)] = static_cast<float>(std::sin(double{angle}));
    }
  }
  num_positions_ = rows;
}

namespace {

// Eight pairs at a time: every input of a chunk (x halves, cos, sin) is read into locals
// before any output is written, so in-place calls are safe and the compiler vectorizes the
// chunk without alias checks. Each element sees the same operations as a scalar loop: two
// products rounded to fp32, then their sum or difference.
// Pairs i0 .. half - 1 one at a time.
template <bool kInverse>
void rotate_tail(const float* x, float* out, const float* cos, const float* sin, int64_t half,
                 int64_t i0) {
  for (int64_t i = i0; i < half; ++i) {
    const float x1 = x[i];
    const float x2 = x[i + half];
    const float a1 = x1 * cos[i];
    const float b1 = x2 * sin[i];
    const float a2 = x2 * cos[i];
    const float b2 = x1 * sin[i];
    out[i] = kInverse ? a1 + b1 : a1 - b1;
    out[i + half] = kInverse ? a2 - b2 : a2 + b2;
  }
}

template <bool kInverse>
void rotate(const float* x, float* out, const float* cos, const float* sin, int64_t head_dim) {
  constexpr int64_t kLanes = 8;
  const int64_t half = head_dim / 2;
  int64_t i = 0;
  for (; i + kLanes <= half; i += kLanes) {
    float x1[kLanes], x2[kLanes], c[kLanes], s[kLanes], o1[kLanes], o2[kLanes];
    for (int64_t u = 0; u < kLanes; ++u) {
      x1[u] = x[i + u];
      x2[u] = x[i + half + u];
      c[u] = cos[i + u];
      s[u] = sin[i + u];
    }
    for (int64_t u = 0; u < kLanes; ++u) {
      const float a1 = x1[u] * c[u];
      const float b1 = x2[u] * s[u];
      const float a2 = x2[u] * c[u];
      const float b2 = x1[u] * s[u];
      o1[u] = kInverse ? a1 + b1 : a1 - b1;
      o2[u] = kInverse ? a2 - b2 : a2 + b2;
    }
    for (int64_t u = 0; u < kLanes; ++u) {
      out[i + u] = o1[u];
      out[i + half + u] = o2[u];
    }
  }
  rotate_tail<kInverse>(x, out, cos, sin, half, i);
}

// The same chunks with AVX2 / AVX-512 registers: the same two rounded products and one rounded
// sum or difference per element (no FMA), so the same bits; the tail as rotate's.
#define S4KV_AVX2 __attribute__((target("avx2")))
#define S4KV_AVX512 __attribute__((target("avx512f")))

template <bool kInverse>
S4KV_AVX2 void rotate_avx2(const float* x, float* out, const float* cos, const float* sin,
                           int64_t head_dim) {
  const int64_t half = head_dim / 2;
  int64_t i = 0;
  for (; i + 8 <= half; i += 8) {
    const __m256 x1 = _mm256_loadu_ps(x + i), x2 = _mm256_loadu_ps(x + half + i);
    const __m256 c = _mm256_loadu_ps(cos + i), s = _mm256_loadu_ps(sin + i);
    const __m256 a1 = _mm256_mul_ps(x1, c), b1 = _mm256_mul_ps(x2, s);
    const __m256 a2 = _mm256_mul_ps(x2, c), b2 = _mm256_mul_ps(x1, s);
    _mm256_storeu_ps(out + i, kInverse ? _mm256_add_ps(a1, b1) : _mm256_sub_ps(a1, b1));
    _mm256_storeu_ps(out + half + i, kInverse ? _mm256_sub_ps(a2, b2) : _mm256_add_ps(a2, b2));
  }
  rotate_tail<kInverse>(x, out, cos, sin, half, i);
}

template <bool kInverse>
S4KV_AVX512 void rotate_avx512(const float* x, float* out, const float* cos, const float* sin,
                               int64_t head_dim) {
  const int64_t half = head_dim / 2;
  int64_t i = 0;
  for (; i + 16 <= half; i += 16) {
    const __m512 x1 = _mm512_loadu_ps(x + i), x2 = _mm512_loadu_ps(x + half + i);
    const __m512 c = _mm512_loadu_ps(cos + i), s = _mm512_loadu_ps(sin + i);
    const __m512 a1 = _mm512_mul_ps(x1, c), b1 = _mm512_mul_ps(x2, s);
    const __m512 a2 = _mm512_mul_ps(x2, c), b2 = _mm512_mul_ps(x1, s);
    _mm512_storeu_ps(out + i, kInverse ? _mm512_add_ps(a1, b1) : _mm512_sub_ps(a1, b1));
    _mm512_storeu_ps(out + half + i, kInverse ? _mm512_sub_ps(a2, b2) : _mm512_add_ps(a2, b2));
  }
  rotate_tail<kInverse>(x, out, cos, sin, half, i);
}

template <bool kInverse>
void rotate_with(cpu::CpuIsa isa, const float* x, float* out, const float* cos, const float* sin,
                 int64_t head_dim) {
  switch (isa) {
    case cpu::CpuIsa::kAvx512:
      rotate_avx512<kInverse>(x, out, cos, sin, head_dim);
      return;
    case cpu::CpuIsa::kAvx2:
      rotate_avx2<kInverse>(x, out, cos, sin, head_dim);
      return;
    case cpu::CpuIsa::kScalar:
      rotate<kInverse>(x, out, cos, sin, head_dim);
      return;
  }
}

}  // namespace

void rope_rotate(const float* x, float* out, const float* cos, const float* sin, int64_t head_dim) {
  static const cpu::CpuIsa isa = cpu::cpu_isa();
  rotate_with<false>(isa, x, out, cos, sin, head_dim);
}

void rope_unrotate(const float* x, float* out, const float* cos, const float* sin,
                   int64_t head_dim) {
  static const cpu::CpuIsa isa = cpu::cpu_isa();
  rotate_with<true>(isa, x, out, cos, sin, head_dim);
}

void rope_rotate_isa(cpu::CpuIsa isa, bool inverse, const float* x, float* out, const float* cos,
                     const float* sin, int64_t head_dim) {
  S4KV_CHECK(cpu::cpu_supports(isa), "rope: this processor lacks ", cpu::cpu_isa_name(isa));
  if (inverse) {
    rotate_with<true>(isa, x, out, cos, sin, head_dim);
  } else {
    rotate_with<false>(isa, x, out, cos, sin, head_dim);
  }
}

}  // namespace s4kv::backend
