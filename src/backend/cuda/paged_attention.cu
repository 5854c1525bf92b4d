// launch_paged_attention (paged_attention.cuh).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cmath>

#include "backend/cuda/act_types.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/hadamard.cuh"
#include "backend/cuda/int4_kivi_device.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/paged_attention.cuh"

namespace s4kv::backend::cuda {
namespace {

constexpr int kD = 128;
constexpr int kWarps = 4;
constexpr int kPerLane = kD / 32;  // lane l owns channels l + 32 j

__device__ inline float fp8_to_float(uint8_t b) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(b), __NV_E4M3);
  return __half2float(__half(h));
}

// Where position p of a token's sequence lives in this step, per format.
struct SeqView {
  const int32_t* table;
  int start;          // seq_len - q_len: positions before it were cached before this step
  int q_begin;        // the sequence's first token row
  int from_pool_end;  // int4_kivi: blocks before it are pool or sink blocks
  int slot;           // int4_kivi: residual slot
};

__device__ inline void load_16bit_row(const uint16_t* row, int lane, bool bf16, float* x) {
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) x[j] = widen16(row[lane + 32 * j], bf16);
}

// K and V channels of this lane at position p; returns whether the value is Hadamard-rotated.
__device__ inline bool load_kv(const PagedAttentionArgs& a, const SeqView& sv, int g, int p,
                               int lane, float* k, float* v) {
  const int b = a.block_size;
  const int64_t kv_dim = static_cast<int64_t>(a.num_kv_heads) * kD;
  const int blk = p / b;
  if (a.cache != kv::KvCacheDtype::kInt4Kivi) {
    const int64_t row = (static_cast<int64_t>(sv.table[blk]) * b + p % b) * kv_dim + g * kD;
    if (a.cache == kv::KvCacheDtype::kFp8E4M3) {
      const auto* kc = static_cast<const uint8_t*>(a.k_cache) + row;
      const auto* vc = static_cast<const uint8_t*>(a.v_cache) + row;
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) {
        k[j] = fp8_to_float(kc[lane + 32 * j]);
        v[j] = fp8_to_float(vc[lane + 32 * j]);
      }
    } else {
      load_16bit_row(static_cast<const uint16_t*>(a.k_cache) + row, lane, a.bf16, k);
      load_16bit_row(static_cast<const uint16_t*>(a.v_cache) + row, lane, a.bf16, v);
    }
    return false;
  }
  if (blk < sv.from_pool_end) {
    const int id = sv.table[blk];
    if (id >= a.num_pool_blocks) {  // a sink block: 16-bit
      const uint16_t* base = a.sink +
                             static_cast<int64_t>(id - a.num_pool_blocks) *
                                 sink_stride_or_packed(a.sink_stride, b, kv_dim) +
                             static_cast<int64_t>(p % b) * kv_dim + g * kD;
      load_16bit_row(base, lane, a.bf16, k);
      load_16bit_row(base + static_cast<int64_t>(b) * kv_dim, lane, a.bf16, v);
      return false;
    }
    const kv::Int4KiviLayout& l = a.layout;
    const std::byte* blk_bytes = a.pool + (static_cast<int64_t>(id) * a.num_kv_heads + g) *
                                              static_cast<int64_t>(l.block_bytes);
    const int t = p % b;
    const auto* k_words =
        reinterpret_cast<const uint32_t*>(blk_bytes + l.k_codes_offset) + t * (kD / 8);
    const auto* v_words =
        reinterpret_cast<const uint32_t*>(blk_bytes + l.v_codes_offset) + t * (kD / 8);
    const int groups = kD / l.value_group_size;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int c = lane + 32 * j;
      k[j] = dequant_int4(k_words, c, fp16_at(blk_bytes + l.k_scale_offset, c),
                          fp16_at(blk_bytes + l.k_zero_offset, c));
      const int gi = t * groups + c / l.value_group_size;
      v[j] = dequant_int4(v_words, c, fp16_at(blk_bytes + l.v_scale_offset, gi),
                          fp16_at(blk_bytes + l.v_zero_offset, gi));
    }
    if (!a.keys_post_rope) {  // rope_rotate with the shared table: pairs (j, j + 2)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int i = lane + 32 * j;
        const float co = a.rope_cos[static_cast<int64_t>(p) * (kD / 2) + i];
        const float si = a.rope_sin[static_cast<int64_t>(p) * (kD / 2) + i];
        const float x1 = k[j], x2 = k[j + 2];
        k[j] = __fsub_rn(__fmul_rn(x1, co), __fmul_rn(x2, si));
        k[j + 2] = __fadd_rn(__fmul_rn(x2, co), __fmul_rn(x1, si));
      }
    }
    return a.value_hadamard;
  }
  if (p < sv.start) {  // the residual ring
    const uint16_t* kr =
        a.residual + ring_k_offset(sv.slot, p, b, a.ring, kv_dim, a.seat_stride) + g * kD;
    load_16bit_row(kr, lane, a.bf16, k);
    load_16bit_row(kr + ring_v_offset(b, a.ring, kv_dim), lane, a.bf16, v);
    return false;
  }
  const int64_t row = static_cast<int64_t>(sv.q_begin + p - sv.start) * kv_dim + g * kD;
  load_16bit_row(a.staging_k + row, lane, a.bf16, k);
  load_16bit_row(a.staging_v + row, lane, a.bf16, v);
  return false;
}

template <typename T>
__global__ void __launch_bounds__(kWarps * 32) paged_attention_kernel(PagedAttentionArgs a) {
  __shared__ float s_m[kWarps], s_l[kWarps];
  __shared__ float s_acc[kWarps][kD], s_rot[kWarps][kD];
  __shared__ float row[kD];
  const int t = a.token_list != nullptr ? a.token_list[blockIdx.x] : blockIdx.x;
  const int h = blockIdx.y;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = h / (a.num_heads / a.num_kv_heads);
  const int s = a.token_seq[t];
  const int pos = a.positions[t];

  SeqView sv;
  sv.table = a.block_tables + static_cast<int64_t>(s) * a.max_blocks_per_seq;
  sv.q_begin = a.query_start_loc[s];
  sv.start = a.seq_lens[s] - (a.query_start_loc[s + 1] - sv.q_begin);
  sv.from_pool_end = 0;
  sv.slot = 0;
  if (a.cache == kv::KvCacheDtype::kInt4Kivi) {
    sv.from_pool_end = a.pool_ends[s];
    sv.slot = a.seats[s];
  }

  float q[kPerLane];
  const float* qrow = a.q + static_cast<int64_t>(t) * a.q_stride + h * kD;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) q[j] = qrow[lane + 32 * j];

  float m = -INFINITY, l = 0.0f;
  float acc[kPerLane] = {}, rot[kPerLane] = {};
  for (int p = warp; p <= pos; p += kWarps) {
    float k[kPerLane], v[kPerLane];
    const bool rotated = load_kv(a, sv, g, p, lane, k, v);
    float dot = 0.0f;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) dot = __fadd_rn(dot, __fmul_rn(q[j], k[j]));
    for (int o = 16; o > 0; o /= 2) dot = __fadd_rn(dot, __shfl_xor_sync(0xffffffffu, dot, o));
    const float score = __fmul_rn(dot, a.scale);
    const float m_new = fmaxf(m, score);
    const float corr = expf(m - m_new);
    const float e = expf(score - m_new);
    l = __fadd_rn(__fmul_rn(l, corr), e);
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      acc[j] = __fmul_rn(acc[j], corr);
      rot[j] = __fmul_rn(rot[j], corr);
      if (rotated) {
        rot[j] = __fadd_rn(rot[j], __fmul_rn(e, v[j]));
      } else {
        acc[j] = __fadd_rn(acc[j], __fmul_rn(e, v[j]));
      }
    }
    m = m_new;
  }
  if (lane == 0) {
    s_m[warp] = m;
    s_l[warp] = l;
  }
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    s_acc[warp][lane + 32 * j] = acc[j];
    s_rot[warp][lane + 32 * j] = rot[j];
  }
  __syncthreads();
  const int c = threadIdx.x;
  float m_all = s_m[0];
  for (int w = 1; w < kWarps; ++w) m_all = fmaxf(m_all, s_m[w]);
  float l_all = 0.0f, o = 0.0f, r = 0.0f;
  for (int w = 0; w < kWarps; ++w) {
    if (s_l[w] == 0.0f) continue;  // a warp that saw no position
    const float f = expf(s_m[w] - m_all);
    l_all = __fadd_rn(l_all, __fmul_rn(s_l[w], f));
    o = __fadd_rn(o, __fmul_rn(s_acc[w][c], f));
    r = __fadd_rn(r, __fmul_rn(s_rot[w][c], f));
  }
  o = __fdiv_rn(o, l_all);
  if (a.value_hadamard) {  // uniform over the block: every thread takes part
    o = __fadd_rn(o, hadamard128(__fdiv_rn(r, l_all), row, c));
  }
  T* out = static_cast<T*>(a.out) + (static_cast<int64_t>(t) * a.num_heads + h) * kD;
  out[c] = from_f32<T>(o);
}

}  // namespace

void launch_paged_attention(const PagedAttentionArgs& a, cudaStream_t stream) {
  S4KV_CHECK(a.num_heads > 0 && a.num_kv_heads > 0 && a.num_heads % a.num_kv_heads == 0 &&
                 a.block_size > 0 && a.num_tokens >= 0 && a.num_tokens <= 0x7fffffff &&
                 a.num_heads <= 65535,
             "paged_attention: heads ", a.num_heads, "/", a.num_kv_heads, " block ", a.block_size);
  const int64_t rows = a.token_list != nullptr ? a.num_listed : a.num_tokens;
  if (rows == 0) return;
  if (a.cache == kv::KvCacheDtype::kInt4Kivi) {
    S4KV_CHECK(
        a.layout.head_dim == kD && a.layout.block_size == a.block_size && a.pool && a.residual &&
            a.staging_k && a.staging_v && a.seats && a.pool_ends && a.ring >= 1 &&
            ring_stride_fits(a.seat_stride, a.block_size, a.ring, int64_t{a.num_kv_heads} * kD) &&
            (a.keys_post_rope || a.rope_cos),
        "paged_attention: int4_kivi arguments");
  } else {
    S4KV_CHECK(a.k_cache != nullptr && a.v_cache != nullptr, "paged_attention: null cache");
  }
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(a.num_heads));
  with_act_type(a.out_dtype, [&](auto zero) {
    launch_plain(paged_attention_kernel<decltype(zero)>, grid, kWarps * 32, 0, stream, a);
  });
  S4KV_CUDA_CHECK(cudaGetLastError());
}

}  // namespace s4kv::backend::cuda
