// launch_int4_kivi_quantize and launch_int4_kivi_commit (int4_kivi_quantize.cuh): one kernel,
// two loaders (fp32 input; 16-bit cache bits with the inverse RoPE); quantize_kernel says how a
// block's threads share the work.
#include <cuda_fp16.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/hadamard.cuh"
#include "backend/cuda/int4_kivi_device.cuh"
#include "backend/cuda/int4_kivi_quantize.cuh"
#include "backend/cuda/launch.cuh"

namespace s4kv::backend::cuda {
namespace {

constexpr int kD = 128;

struct Params {
  uint16_t scale, zero;
};

// The reference's rule for one group (int4_params_ref): -0 canonicalized, true division.
__device__ Params params(float mn, float mx) {
  mn = __fadd_rn(mn, 0.0f);
  mx = __fadd_rn(mx, 0.0f);
  const float s = __fdiv_rn(__fsub_rn(mx, mn), 15.0f);
  return {__half_as_ushort(__float2half_rn(s)), __half_as_ushort(__float2half_rn(mn))};
}

// int4_code_ref: q = fmin(fmax(rint((x - z) / s), 0), 15); 0 when the scale is +-0.
__device__ uint32_t code(float x, Params p) {
  if ((p.scale & 0x7fff) == 0) return 0;
  const float s = __half2float(__ushort_as_half(p.scale));
  const float z = __half2float(__ushort_as_half(p.zero));
  const float r = rintf(__fdiv_rn(__fsub_rn(x, z), s));
  return static_cast<uint32_t>(fminf(fmaxf(r, 0.0f), 15.0f));
}

// Packs the 8 codes of word w (channels 8w..8w+7) in the format's nibble order.
__device__ uint32_t pack_word(const uint8_t* codes, int w) {
  uint32_t word = 0;
  for (int j = 0; j < 8; ++j) word |= uint32_t{codes[w * 8 + j]} << (4 * ((j % 2) * 4 + j / 2));
  return word;
}

// Loaders: key and value element (t, c) of block blk as the quantizer's fp32 input.
struct Fp32Input {
  const float* keys;
  const float* values;
  int b;
  __device__ float key(size_t blk, int t, int c) const { return keys[(blk * b + t) * kD + c]; }
  __device__ float value(size_t blk, int t, int c) const { return values[(blk * b + t) * kD + c]; }
};

struct SixteenBitInput {
  const uint16_t* keys;
  const uint16_t* values;
  bool bf16;
  const int32_t* first_position;
  const float* cos;
  const float* sin;
  bool post_rope;
  int b;
  __device__ float widen(uint16_t h) const { return widen16(h, bf16); }
  __device__ float key(size_t blk, int t, int c) const {
    const uint16_t* row = keys + (blk * b + t) * kD;
    if (post_rope) return widen(row[c]);
    constexpr int h = kD / 2;
    const int i = c < h ? c : c - h;
    const size_t pos = static_cast<size_t>(first_position[blk]) + t;
    const float co = cos[pos * h + i], si = sin[pos * h + i];
    const float x1 = widen(row[i]), x2 = widen(row[i + h]);
    // rope_unrotate: out[i] = x1*c + x2*s, out[i+h] = x2*c - x1*s, products rounded first.
    return c < h ? __fadd_rn(__fmul_rn(x1, co), __fmul_rn(x2, si))
                 : __fsub_rn(__fmul_rn(x2, co), __fmul_rn(x1, si));
  }
  __device__ float value(size_t blk, int t, int c) const {
    return widen(values[(blk * b + t) * kD + c]);
  }
};

constexpr int kThreads = 512;
constexpr int kSlices = kThreads / kD;  // key threads per channel, each a slice of the tokens
constexpr int kMaxB = 128;
constexpr unsigned kFull = 0xffffffffu;

// One block of 512 threads per input block, for latency (a decode step quantizes a few blocks
// per layer, so each block's time is on the step's critical path):
//   keys: thread (slice s, channel c) reads tokens s, s + 4, ... of channel c once (kept in
//     registers), the four slices' min / max meet in shared memory, then each thread codes its
//     tokens and the code words are packed from shared memory;
//   values: one warp per token, lane l holding channels 4l .. 4l + 3: the Hadamard stages
//     h = 1, 2 in registers and h = 4 .. 64 by shuffles (each butterfly the same rounded a + b or
//     a - b as kv::hadamard_ref), group min / max by shuffles within the group's lanes, codes,
//     and each word's two halves joined by a shuffle.
// fminf / fmaxf give the same extremes in any order, so the bytes are the reference's.
template <typename Input>
__global__ void __launch_bounds__(kThreads)
    quantize_kernel(Input in, std::byte* blocks, const int64_t* out_index, kv::Int4KiviLayout l,
                    bool hadamard, const int32_t* live_blocks) {
  __shared__ float slice_min[kSlices][kD], slice_max[kSlices][kD];
  __shared__ uint8_t key_codes[kMaxB][kD];
  const int tid = threadIdx.x;
  const int b = l.block_size;
  const size_t blk = blockIdx.x;
  allow_dependent_launch();
  grid_dependency_wait();
  if (live_blocks != nullptr && static_cast<int64_t>(blk) >= *live_blocks) return;
  std::byte* out =
      blocks + (out_index != nullptr ? static_cast<size_t>(out_index[blk]) : blk) * l.block_bytes;
  auto* k_codes = reinterpret_cast<uint32_t*>(out + l.k_codes_offset);
  auto* v_codes = reinterpret_cast<uint32_t*>(out + l.v_codes_offset);
  auto* k_scale = reinterpret_cast<uint16_t*>(out + l.k_scale_offset);
  auto* k_zero = reinterpret_cast<uint16_t*>(out + l.k_zero_offset);
  auto* v_scale = reinterpret_cast<uint16_t*>(out + l.v_scale_offset);
  auto* v_zero = reinterpret_cast<uint16_t*>(out + l.v_zero_offset);

  // Keys: channel c over the block's tokens.
  {
    const int c = tid % kD, s = tid / kD;
    float keep[kMaxB / kSlices];
    float mn = __int_as_float(0x7f800000), mx = __int_as_float(0xff800000);  // +inf, -inf
#pragma unroll
    for (int i = 0; i < kMaxB / kSlices; ++i) {
      if (i < b / kSlices) {
        keep[i] = in.key(blk, s + i * kSlices, c);
        mn = fminf(mn, keep[i]);
        mx = fmaxf(mx, keep[i]);
      }
    }
    slice_min[s][c] = mn;
    slice_max[s][c] = mx;
    __syncthreads();
#pragma unroll
    for (int o = 0; o < kSlices; ++o) {
      mn = fminf(mn, slice_min[o][c]);
      mx = fmaxf(mx, slice_max[o][c]);
    }
    const Params kp = params(mn, mx);
    if (s == 0) {
      k_scale[c] = kp.scale;
      k_zero[c] = kp.zero;
    }
#pragma unroll
    for (int i = 0; i < kMaxB / kSlices; ++i) {
      if (i < b / kSlices) key_codes[s + i * kSlices][c] = static_cast<uint8_t>(code(keep[i], kp));
    }
    __syncthreads();
    for (int w = tid; w < b * (kD / 8); w += kThreads) {
      k_codes[w] = pack_word(key_codes[w / (kD / 8)], w % (kD / 8));
    }
  }

  // Values: token t, group of channel c.
  const int warp = tid / 32, lane = tid % 32;
  const int gv = l.value_group_size, group_lanes = gv / 4;
  for (int t = warp; t < b; t += kThreads / 32) {
    float x[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) x[j] = in.value(blk, t, 4 * lane + j);
    if (hadamard) {
      // h = 1, 2: both ends of each butterfly in this lane (channels 4 lane + j).
#pragma unroll
      for (int h = 1; h <= 2; h *= 2) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          if ((j & h) == 0) {
            const float a = x[j], y = x[j + h];
            x[j] = __fadd_rn(a, y);
            x[j + h] = __fsub_rn(a, y);
          }
        }
      }
      // h = 4 .. 64: the partner channel c ^ h sits in lane l ^ (h / 4).
#pragma unroll
      for (int h = 4; h < kD; h *= 2) {
        const bool low = (lane & (h / 4)) == 0;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float other = __shfl_xor_sync(kFull, x[j], h / 4);
          x[j] = low ? __fadd_rn(x[j], other) : __fsub_rn(other, x[j]);
        }
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) x[j] = __fmul_rn(x[j], kv::kHadamardScale128);
    }
    float vmn = fminf(fminf(x[0], x[1]), fminf(x[2], x[3]));
    float vmx = fmaxf(fmaxf(x[0], x[1]), fmaxf(x[2], x[3]));
    for (int off = 1; off < group_lanes; off *= 2) {
      vmn = fminf(vmn, __shfl_xor_sync(kFull, vmn, off));
      vmx = fmaxf(vmx, __shfl_xor_sync(kFull, vmx, off));
    }
    const Params vp = params(vmn, vmx);
    if (lane % group_lanes == 0) {
      const int g = 4 * lane / gv;
      v_scale[t * (kD / gv) + g] = vp.scale;
      v_zero[t * (kD / gv) + g] = vp.zero;
    }
    // Word w holds channels 8w .. 8w + 7: this lane's four are its j = 0..3 (even lane) or
    // j = 4..7 (odd lane), at pack_word's nibbles.
    uint32_t half = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int jw = (lane % 2) * 4 + j;
      half |= code(x[j], vp) << (4 * ((jw % 2) * 4 + jw / 2));
    }
    const uint32_t word = half | __shfl_xor_sync(kFull, half, 1);
    if (lane % 2 == 0) v_codes[t * (kD / 8) + lane / 2] = word;
  }
}

void check_layout(const kv::Int4KiviLayout& l, int64_t num_blocks) {
  S4KV_CHECK(l.head_dim == kD, "int4_kivi quantize: head_dim ", l.head_dim, " (128 only)");
  S4KV_CHECK(num_blocks >= 0 && l.block_size > 0 && l.block_size <= kMaxB &&
                 l.block_size % kSlices == 0 && l.value_group_size >= 8 &&
                 kD % l.value_group_size == 0 && l.block_bytes % 4 == 0,
             "int4_kivi quantize: bad layout or count");
}

}  // namespace

void launch_int4_kivi_quantize(const Int4KiviQuantizeArgs& a, cudaStream_t stream) {
  check_layout(a.layout, a.num_blocks);
  if (a.num_blocks == 0) return;
  S4KV_CHECK(a.keys != nullptr && a.values != nullptr && a.blocks != nullptr,
             "int4_kivi quantize: null buffer");
  const Fp32Input in{a.keys, a.values, a.layout.block_size};
  launch_dependent(quantize_kernel<Fp32Input>, static_cast<unsigned>(a.num_blocks), kThreads, 0,
                   stream, in, a.blocks, nullptr, a.layout, a.value_hadamard, nullptr);
  S4KV_CUDA_CHECK(cudaGetLastError());
}

void launch_int4_kivi_commit(const Int4KiviCommitArgs& a, cudaStream_t stream) {
  check_layout(a.layout, a.num_blocks);
  if (a.num_blocks == 0) return;
  S4KV_CHECK(a.keys != nullptr && a.values != nullptr && a.blocks != nullptr &&
                 a.first_position != nullptr &&
                 (a.keys_post_rope || (a.cos != nullptr && a.sin != nullptr)),
             "int4_kivi commit: null buffer");
  const SixteenBitInput in{a.keys, a.values, a.bf16,           a.first_position,
                           a.cos,  a.sin,    a.keys_post_rope, a.layout.block_size};
  launch_dependent(quantize_kernel<SixteenBitInput>, static_cast<unsigned>(a.num_blocks), kThreads,
                   0, stream, in, a.blocks, a.out_index, a.layout, a.value_hadamard, a.live_blocks);
  S4KV_CUDA_CHECK(cudaGetLastError());
}

}  // namespace s4kv::backend::cuda
