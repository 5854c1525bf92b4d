// forward_kernels.cuh's launchers. Arithmetic is written with explicit _rn intrinsics where
// the CPU reference rounds step by step, so fp32 runs stay close to it (summation order still
// differs: block reductions).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "backend/cuda/act_types.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/forward_kernels.cuh"
#include "backend/cuda/kv_encode.cuh"
#include "backend/cuda/launch.cuh"

namespace s4kv::backend::cuda {
namespace {

unsigned grid_of(int64_t n) {
  S4KV_CHECK(n > 0 && n <= 0x7fffffff, "cuda: grid of ", n);
  return static_cast<unsigned>(n);
}

template <typename T>
__global__ void embed_kernel(const T* table, const int32_t* ids, float* x, int64_t hidden) {
  allow_dependent_launch();
  grid_dependency_wait();
  const T* src = table + static_cast<int64_t>(ids[blockIdx.x]) * hidden;
  float* dst = x + blockIdx.x * hidden;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) dst[i] = to_f32(src[i]);
}

// A row's threads: enough that a decode step's few rows (one thread block each) are not a
// long loop of dependent loads (hidden 3,584: four values a thread).
constexpr int kNormThreads = 1024;

// Elementwise kernels over [rows, width]: thread block j covers kSpan columns of row
// j / chunks, four values a thread with their loads issued together, so that one row (a decode
// step of batch 1) spreads over many blocks instead of looping in one.
constexpr int kEltThreads = 256;
constexpr int kEltPerThread = 4;
constexpr int64_t kSpan = kEltThreads * kEltPerThread;

// kPer > 0: the row has at most kPer x kNormThreads values, held in registers, their loads and
// the weight's issued together (the loop's loads were a chain of dependent round trips: four a
// pass at hidden 3,584, two passes); kPer == 0: any hidden, in a loop. Either way thread t sums
// values t, t + kNormThreads, ... in that order, so the two give the same bits.
template <typename T, int kPer>
__global__ void __launch_bounds__(kNormThreads)
    row_rmsnorm_kernel(const float* x, const int32_t* rows, const float* w, T* out, int64_t hidden,
                       float eps) {
  __shared__ float partial[kNormThreads / 32];
  allow_dependent_launch();
  grid_dependency_wait();
  const int64_t src_row = rows != nullptr ? rows[blockIdx.x] : blockIdx.x;
  const float* row = x + src_row * hidden;
  const int t = static_cast<int>(threadIdx.x);
  float v[kPer > 0 ? kPer : 1], wv[kPer > 0 ? kPer : 1];
  float sum = 0.0f;
  if constexpr (kPer > 0) {
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int64_t i = t + j * kNormThreads;
      v[j] = i < hidden ? row[i] : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int64_t i = t + j * kNormThreads;
      wv[j] = i < hidden ? w[i] : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      if (t + j * kNormThreads < hidden) sum = __fadd_rn(sum, __fmul_rn(v[j], v[j]));
    }
  } else {
    for (int64_t i = t; i < hidden; i += kNormThreads) {
      sum = __fadd_rn(sum, __fmul_rn(row[i], row[i]));
    }
  }
  for (int o = 16; o > 0; o /= 2) sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, o));
  if (t % 32 == 0) partial[t / 32] = sum;
  __syncthreads();
  float total = 0.0f;
  for (int i = 0; i < kNormThreads / 32; ++i) total = __fadd_rn(total, partial[i]);
  const float mean = __fdiv_rn(total, static_cast<float>(hidden));
  const float inv_rms = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps)));
  T* dst = out + blockIdx.x * hidden;
  if constexpr (kPer > 0) {
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int64_t i = t + j * kNormThreads;
      if (i < hidden) dst[i] = from_f32<T>(__fmul_rn(__fmul_rn(v[j], inv_rms), wv[j]));
    }
  } else {
    for (int64_t i = t; i < hidden; i += kNormThreads) {
      dst[i] = from_f32<T>(__fmul_rn(__fmul_rn(row[i], inv_rms), w[i]));
    }
  }
}
// Values a thread the register path of row_rmsnorm_kernel holds: hidden <= 8,192.
constexpr int kNormPer = 8;

__global__ void __launch_bounds__(kEltThreads)
    add_bias_kernel(float* __restrict__ y, const float* __restrict__ bias, int64_t width,
                    int64_t chunks) {
  allow_dependent_launch();
  grid_dependency_wait();
  float* row = y + static_cast<int64_t>(blockIdx.x) / chunks * width;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) % chunks * kSpan + threadIdx.x;
#pragma unroll
  for (int j = 0; j < kEltPerThread; ++j) {
    const int64_t i = c0 + j * kEltThreads;
    if (i < width) row[i] = __fadd_rn(row[i], bias[i]);
  }
}

template <typename T>
__global__ void __launch_bounds__(kEltThreads)
    silu_mul_kernel(const float* __restrict__ gate_up, T* __restrict__ out, int64_t inter,
                    int64_t chunks) {
  allow_dependent_launch();
  grid_dependency_wait();
  const int64_t t = static_cast<int64_t>(blockIdx.x) / chunks;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) % chunks * kSpan + threadIdx.x;
  const float* gate = gate_up + t * 2 * inter;
  const float* up = gate + inter;
  T* o = out + t * inter;
  float g[kEltPerThread], u[kEltPerThread];
#pragma unroll
  for (int j = 0; j < kEltPerThread; ++j) {
    const int64_t i = c0 + j * kEltThreads;
    g[j] = i < inter ? gate[i] : 0.0f;
    u[j] = i < inter ? up[i] : 0.0f;
  }
#pragma unroll
  for (int j = 0; j < kEltPerThread; ++j) {
    const int64_t i = c0 + j * kEltThreads;
    if (i >= inter) break;
    o[i] = from_f32<T>(silu_mul_value(g[j], u[j]));
  }
}

// One thread block per token: K and V rows stored as the cache holds them.
__global__ void kv_write_kernel(const float* k, const float* v, int64_t row_stride,
                                const int64_t* slots, void* k_cache, void* v_cache, int64_t kv_dim,
                                KvStore store) {
  allow_dependent_launch();
  grid_dependency_wait();
  const int64_t t = blockIdx.x;
  const int64_t dst = (slots != nullptr ? slots[t] : t) * kv_dim;
  for (int64_t i = threadIdx.x; i < kv_dim; i += blockDim.x) {
    store_kv(k_cache, store, dst + i, k[t * row_stride + i]);
    store_kv(v_cache, store, dst + i, v[t * row_stride + i]);
  }
}

// One thread block per (token, head) of rope's rows, one thread per channel pair: query heads
// rotated in place; K heads rotated in place and stored, with their V heads, at the token's slot.
__global__ void rope_kv_write_kernel(float* x, int64_t row_stride, const int32_t* positions,
                                     const float* cos, const float* sin, int num_q_heads,
                                     int num_heads, int head_dim, const int64_t* slots,
                                     void* k_cache, void* v_cache, KvStore store) {
  allow_dependent_launch();
  grid_dependency_wait();
  const int half = head_dim / 2;
  const int i = threadIdx.x;
  const int64_t token = blockIdx.x / num_heads;
  const int h = static_cast<int>(blockIdx.x % num_heads);
  float* row = x + token * row_stride + static_cast<int64_t>(h) * head_dim;
  const int64_t pos = positions[token];
  float x1 = row[i], x2 = row[i + half];
  rope_turn(x1, x2, cos[pos * half + i], sin[pos * half + i]);
  row[i] = x1;
  row[i + half] = x2;
  if (h < num_q_heads) return;
  const int64_t kv_dim = static_cast<int64_t>(num_heads - num_q_heads) * head_dim;
  const int64_t col = static_cast<int64_t>(h - num_q_heads) * head_dim;
  const int64_t dst = (slots != nullptr ? slots[token] : token) * kv_dim + col;
  const float* v = x + token * row_stride + static_cast<int64_t>(num_heads) * head_dim + col;
  store_kv(k_cache, store, dst + i, x1);
  store_kv(k_cache, store, dst + i + half, x2);
  store_kv(v_cache, store, dst + i, v[i]);
  store_kv(v_cache, store, dst + i + half, v[i + half]);
}

}  // namespace

void launch_embed(const void* table, DType act_dtype, const int32_t* token_ids, float* x,
                  int64_t num_tokens, int64_t hidden, cudaStream_t stream) {
  if (num_tokens == 0) return;
  with_act_type(act_dtype, [&](auto zero) {
    using T = decltype(zero);
    launch_dependent(embed_kernel<T>, grid_of(num_tokens), 256, 0, stream,
                     static_cast<const T*>(table), token_ids, x, hidden);
  });
  S4KV_CUDA_CHECK(cudaGetLastError());
}

void launch_row_rmsnorm(const RowNormArgs& a, cudaStream_t stream) {
  S4KV_CHECK(a.hidden > 0 && a.num_rows >= 0, "row_rmsnorm: shape");
  if (a.num_rows == 0) return;
  with_act_type(a.act_dtype, [&](auto zero) {
    using T = decltype(zero);
    const auto kernel = a.hidden <= kNormPer * kNormThreads ? row_rmsnorm_kernel<T, kNormPer>
                                                            : row_rmsnorm_kernel<T, 0>;
    launch_dependent(kernel, grid_of(a.num_rows), kNormThreads, 0, stream, a.x, a.rows, a.weight,
                     static_cast<T*>(a.out), a.hidden, a.eps);
  });
  S4KV_CUDA_CHECK(cudaGetLastError());
}

void launch_add_bias(float* y, const float* bias, int64_t num_tokens, int64_t width,
                     cudaStream_t stream) {
  if (num_tokens == 0) return;
  const int64_t chunks = (width + kSpan - 1) / kSpan;
  launch_dependent(add_bias_kernel, grid_of(num_tokens * chunks), kEltThreads, 0, stream, y, bias,
                   width, chunks);
  S4KV_CUDA_CHECK(cudaGetLastError());
}

void launch_silu_mul(const float* gate_up, void* out, DType act_dtype, int64_t num_tokens,
                     int64_t inter, cudaStream_t stream) {
  if (num_tokens == 0) return;
  with_act_type(act_dtype, [&](auto zero) {
    using T = decltype(zero);
    const int64_t chunks = (inter + kSpan - 1) / kSpan;
    launch_dependent(silu_mul_kernel<T>, grid_of(num_tokens * chunks), kEltThreads, 0, stream,
                     gate_up, static_cast<T*>(out), inter, chunks);
  });
  S4KV_CUDA_CHECK(cudaGetLastError());
}

KvStore kv_store_of(const KvWriteArgs& a) {
  switch (a.cache_dtype) {
    case DType::kBF16:
      return KvStore::kBf16;
    case DType::kF16:
      return KvStore::kF16;
    case DType::kF8E4M3:
      S4KV_CHECK(a.fp8_from == DType::kBF16 || a.fp8_from == DType::kF16, "kv_write: fp8_from");
      return a.fp8_from == DType::kBF16 ? KvStore::kFp8FromBf16 : KvStore::kFp8FromF16;
    default:
      S4KV_CHECK(false, "kv_write: cache dtype ", dtype_name(a.cache_dtype));
  }
  return KvStore::kBf16;
}

void launch_kv_write(const KvWriteArgs& a, cudaStream_t stream) {
  S4KV_CHECK(a.kv_dim > 0 && a.row_stride >= a.kv_dim && a.num_tokens >= 0, "kv_write: shape");
  if (a.num_tokens == 0) return;
  launch_dependent(kv_write_kernel, grid_of(a.num_tokens), 256, 0, stream, a.k, a.v, a.row_stride,
                   a.slot_mapping, a.k_cache, a.v_cache, a.kv_dim, kv_store_of(a));
  S4KV_CUDA_CHECK(cudaGetLastError());
}

void launch_rope_kv_write(const RopeArgs& r, int64_t num_q_heads, const KvWriteArgs& a,
                          cudaStream_t stream) {
  const int64_t stride = r.row_stride != 0 ? r.row_stride : r.num_heads * r.head_dim;
  S4KV_CHECK(r.num_tokens == a.num_tokens && r.head_dim > 0 && r.head_dim % 2 == 0 &&
                 r.head_dim <= 1024 && num_q_heads >= 0 && r.num_heads > num_q_heads &&
                 a.kv_dim == (r.num_heads - num_q_heads) * r.head_dim && a.row_stride == stride &&
                 a.k == r.x + num_q_heads * r.head_dim && a.v == a.k + a.kv_dim &&
                 stride >= (r.num_heads * r.head_dim) + a.kv_dim,
             "rope_kv_write: the K and V heads must follow rope's heads in its rows");
  if (a.num_tokens == 0) return;
  S4KV_CHECK(r.positions != nullptr && r.cos != nullptr && r.sin != nullptr,
             "rope_kv_write: null buffer");
  launch_dependent(rope_kv_write_kernel, grid_of(r.num_tokens * r.num_heads),
                   static_cast<unsigned>(r.head_dim / 2), 0, stream, r.x, stride, r.positions,
                   r.cos, r.sin, static_cast<int>(num_q_heads), static_cast<int>(r.num_heads),
                   static_cast<int>(r.head_dim), a.slot_mapping, a.k_cache, a.v_cache,
                   kv_store_of(a));
  S4KV_CUDA_CHECK(cudaGetLastError());
}

}  // namespace s4kv::backend::cuda
