#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kv_encode.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/rope.cuh"
#include "backend/cuda/skinny_gemm.cuh"

namespace s4kv::backend::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kRowsPerWarp = 2;
constexpr int kUnroll = 4;  // 16-byte chunks per row a lane has in flight
constexpr unsigned kFull = 0xffffffffu;

// The 8 values of a 16-byte chunk, exactly widened.
template <bool kBf16>
__device__ __forceinline__ void widen8(const uint4& v, float (&f)[8]) {
  const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (kBf16) {
      f[2 * i] = __uint_as_float(u[i] << 16);
      f[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
    } else {
      const float2 p = __half22float2(*reinterpret_cast<const __half2*>(&u[i]));
      f[2 * i] = p.x;
      f[2 * i + 1] = p.y;
    }
  }
}

// kRopeKv's epilogue for token m: channels c and c + 64 of head `head` (x1, x2, the bias added).
__device__ inline void rope_kv_pair(const SkinnyEpilogue& e, float* y_row, int m, int head, int c,
                                    float x1, float x2) {
  const int nq = e.num_q_heads, nkv = e.num_kv_heads;
  if (head < nq + nkv) {
    const int64_t at = static_cast<int64_t>(e.positions[m]) * 64 + c;
    rope_turn(x1, x2, e.cos[at], e.sin[at]);
  }
  y_row[head * 128 + c] = x1;
  y_row[head * 128 + c + 64] = x2;
  if (head < nq) return;
  const bool value = head >= nq + nkv;
  const int64_t dst = (e.slots != nullptr ? e.slots[m] : m) * (int64_t{nkv} * 128) +
                      (head - nq - (value ? nkv : 0)) * 128 + c;
  void* cache = value ? e.v_cache : e.k_cache;
  store_kv(cache, e.store, dst, x1);
  store_kv(cache, e.store, dst + 64, x2);
}

// Warp w: output rows kRowsPerWarp * w .. + kRowsPerWarp - 1 for all N rows of x (kSiluMul:
// gate row w and up row w + out / 2; kRopeKv: channels w % 64 and w % 64 + 64 of head w / 64).
template <bool kBf16, int N, SkinnyEpi kEpi>
__global__ void __launch_bounds__(kThreads)
    skinny_gemm_kernel(const uint4* __restrict__ x, const uint4* __restrict__ w,
                       float* __restrict__ y, int64_t chunks, int64_t out, bool accumulate,
                       const float* __restrict__ bias, SkinnyEpilogue epi) {
  constexpr bool kPair = kEpi == SkinnyEpi::kSiluMul || kEpi == SkinnyEpi::kRopeKv;
  allow_dependent_launch();
  const int lane = threadIdx.x % 32;
  const int64_t warp_id = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int64_t inter = out / 2;
  const int64_t row0 = kPair ? warp_id : warp_id * kRowsPerWarp;
  const bool live = row0 < (kPair ? inter : out);
  const uint4* wr[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t p = live ? row0 : 0;
    if constexpr (kEpi == SkinnyEpi::kSiluMul) {
      wr[r] = w + (p + r * inter) * chunks;
    } else if constexpr (kEpi == SkinnyEpi::kRopeKv) {
      wr[r] = w + (p / 64 * 128 + p % 64 + r * 64) * chunks;
    } else {
      wr[r] = w + (row0 + r < out ? row0 + r : out - 1) * chunks;  // a past-the-end row re-reads
    }
  }
  float acc[kRowsPerWarp][N] = {};
  // Each iteration's weight chunks are loaded at its start, eight 16-byte loads in flight per
  // lane; the first iteration's before the wait for the previous kernel (whose x this one
  // reads; no kernel writes weights).
  uint4 wv[kUnroll][kRowsPerWarp];
  auto load = [&](int64_t base) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t c = base + 32 * u;
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        wv[u][r] = live && c < chunks ? __ldcs(wr[r] + c) : uint4{};
      }
    }
  };
  load(lane);
  grid_dependency_wait();
  if (live) {
    for (int64_t base = lane; base < chunks; base += 32 * kUnroll) {
      if (base != lane) load(base);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = base + 32 * u;
        if (c >= chunks) break;
        float wf[kRowsPerWarp][8];
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) widen8<kBf16>(wv[u][r], wf[r]);
#pragma unroll
        for (int m = 0; m < N; ++m) {
          float xf[8];
          widen8<kBf16>(__ldg(x + m * chunks + c), xf);
#pragma unroll
          for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
            for (int i = 0; i < 8; ++i) acc[r][m] = fmaf(xf[i], wf[r][i], acc[r][m]);
          }
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
    for (int m = 0; m < N; ++m) {
      float v = acc[r][m];
#pragma unroll
      for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(kFull, v, off);
      acc[r][m] = v;
    }
  }
  if (live && lane == 0) {
    if constexpr (kEpi == SkinnyEpi::kRopeKv) {  // rope_kv_write_kernel's, after the bias
      const int head = static_cast<int>(row0 / 64), c = static_cast<int>(row0 % 64);
#pragma unroll
      for (int m = 0; m < N; ++m) {
        float x1 = acc[0][m], x2 = acc[1][m];
        if (bias != nullptr) {
          x1 = __fadd_rn(x1, bias[head * 128 + c]);
          x2 = __fadd_rn(x2, bias[head * 128 + c + 64]);
        }
        rope_kv_pair(epi, y + m * out, m, head, c, x1, x2);
      }
    } else if constexpr (kEpi == SkinnyEpi::kSiluMul) {  // silu_mul_kernel's arithmetic
      auto* act = static_cast<uint16_t*>(epi.act);
#pragma unroll
      for (int m = 0; m < N; ++m) {
        act[m * inter + row0] = encode16(silu_mul_value(acc[0][m], acc[1][m]), kBf16);
      }
    } else {
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        if (row0 + r >= out) break;
#pragma unroll
        for (int m = 0; m < N; ++m) {
          float* dst = y + m * out + row0 + r;
          const float v = accumulate ? *dst + acc[r][m] : acc[r][m];
          *dst = bias != nullptr ? __fadd_rn(v, bias[row0 + r]) : v;
        }
      }
    }
  }
}

template <bool kBf16, int N, SkinnyEpi kEpi>
void launch_rows(const uint4* x, const uint4* w, float* y, int64_t chunks, int64_t out,
                 bool accumulate, const float* bias, const SkinnyEpilogue& epi,
                 cudaStream_t stream) {
  const int64_t warps = kEpi == SkinnyEpi::kSiluMul || kEpi == SkinnyEpi::kRopeKv
                            ? out / 2
                            : (out + kRowsPerWarp - 1) / kRowsPerWarp;
  const auto blocks = static_cast<unsigned>((warps + kWarps - 1) / kWarps);
  launch_dependent_as(LaunchKind::kGemm, skinny_gemm_kernel<kBf16, N, kEpi>, blocks, kThreads, 0,
                      stream, x, w, y, chunks, out, accumulate, bias, epi);
}

template <bool kBf16, SkinnyEpi kEpi>
void launch_typed(const uint4* x, const uint4* w, float* y, int64_t n, int64_t chunks, int64_t out,
                  bool accumulate, const float* bias, const SkinnyEpilogue& epi,
                  cudaStream_t stream) {
  switch (n) {
#define S4KV_SKINNY_CASE(N)                                                           \
  case N:                                                                             \
    launch_rows<kBf16, N, kEpi>(x, w, y, chunks, out, accumulate, bias, epi, stream); \
    break;
    S4KV_SKINNY_CASE(1)
    S4KV_SKINNY_CASE(2)
    S4KV_SKINNY_CASE(3)
    S4KV_SKINNY_CASE(4)
    S4KV_SKINNY_CASE(5)
    S4KV_SKINNY_CASE(6)
    S4KV_SKINNY_CASE(7)
    S4KV_SKINNY_CASE(8)
#undef S4KV_SKINNY_CASE
    default:
      S4KV_CHECK(false, "skinny gemm: n ", n);
  }
}

template <bool kBf16>
void launch_epi(const uint4* x, const uint4* w, float* y, int64_t n, int64_t chunks, int64_t out,
                bool accumulate, const float* bias, const SkinnyEpilogue& epi,
                cudaStream_t stream) {
  switch (epi.kind) {
    case SkinnyEpi::kNone:
      launch_typed<kBf16, SkinnyEpi::kNone>(x, w, y, n, chunks, out, accumulate, bias, epi, stream);
      break;
    case SkinnyEpi::kSiluMul:
      launch_typed<kBf16, SkinnyEpi::kSiluMul>(x, w, y, n, chunks, out, accumulate, bias, epi,
                                               stream);
      break;
    case SkinnyEpi::kRopeKv:
      launch_typed<kBf16, SkinnyEpi::kRopeKv>(x, w, y, n, chunks, out, accumulate, bias, epi,
                                              stream);
      break;
  }
}

}  // namespace

bool skinny_gemm_supports(DType dtype, const void* x, const void* w, int64_t n, int64_t in) {
  return (dtype == DType::kBF16 || dtype == DType::kF16) && n >= 1 && n <= kSkinnyMaxRows &&
         in > 0 && in % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

void launch_skinny_gemm(DType dtype, const void* x, const void* w, float* y, int64_t n, int64_t in,
                        int64_t out, bool accumulate, const float* bias, cudaStream_t stream,
                        const SkinnyEpilogue& epi) {
  S4KV_CHECK(skinny_gemm_supports(dtype, x, w, n, in) && out > 0 &&
                 (out + kRowsPerWarp * kWarps - 1) / (kRowsPerWarp * kWarps) <= 0x7fffffff,
             "skinny gemm: dtype ", dtype_name(dtype), ", n ", n, ", in ", in, ", out ", out);
  switch (epi.kind) {
    case SkinnyEpi::kNone:
      S4KV_CHECK(y != nullptr, "skinny gemm: no output");
      break;
    case SkinnyEpi::kSiluMul:
      S4KV_CHECK(epi.act != nullptr && out % 2 == 0 && bias == nullptr && !accumulate,
                 "skinny gemm: silu_mul epilogue arguments");
      break;
    case SkinnyEpi::kRopeKv:
      S4KV_CHECK(y != nullptr && !accumulate && epi.positions != nullptr && epi.cos != nullptr &&
                     epi.sin != nullptr && epi.num_q_heads >= 0 && epi.num_kv_heads > 0 &&
                     out == int64_t{128} * (epi.num_q_heads + 2 * epi.num_kv_heads) &&
                     epi.k_cache != nullptr && epi.v_cache != nullptr,
                 "skinny gemm: rope_kv epilogue arguments");
      break;
  }
  const auto* xv = static_cast<const uint4*>(x);
  const auto* wv = static_cast<const uint4*>(w);
  if (dtype == DType::kBF16) {
    launch_epi<true>(xv, wv, y, n, in / 8, out, accumulate, bias, epi, stream);
  } else {
    launch_epi<false>(xv, wv, y, n, in / 8, out, accumulate, bias, epi, stream);
  }
  S4KV_CUDA_CHECK(cudaGetLastError());
}

}  // namespace s4kv::backend::cuda
