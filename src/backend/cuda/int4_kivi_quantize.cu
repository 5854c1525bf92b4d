// launch_int4_kivi_quantize and launch_int4_kivi_commit (int4_kivi_quantize.cuh): one kernel,
// two loaders (fp32 input; 16-bit cache bits with the inverse RoPE). Thread c of a block owns key
// channel c and value channel c; the value rows go one token at a time through shared memory
// (Hadamard stages, group min/max, codes), and threads 0..D/8-1 pack each token's code words.
#include <cuda_fp16.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/hadamard.cuh"
#include "backend/cuda/int4_kivi_device.cuh"
#include "backend/cuda/int4_kivi_quantize.cuh"

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

template <typename Input>
__global__ void quantize_kernel(Input in, std::byte* blocks, const int64_t* out_index,
                                kv::Int4KiviLayout l, bool hadamard, const int32_t* live_blocks) {
  __shared__ float row[kD];
  __shared__ uint8_t codes[kD];
  const int c = threadIdx.x;
  const int b = l.block_size;
  const size_t blk = blockIdx.x;
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
  float mn = in.key(blk, 0, c), mx = mn;
  for (int t = 1; t < b; ++t) {
    mn = fminf(mn, in.key(blk, t, c));
    mx = fmaxf(mx, in.key(blk, t, c));
  }
  const Params kp = params(mn, mx);
  k_scale[c] = kp.scale;
  k_zero[c] = kp.zero;
  for (int t = 0; t < b; ++t) {
    codes[c] = static_cast<uint8_t>(code(in.key(blk, t, c), kp));
    __syncthreads();
    if (c < kD / 8) k_codes[t * (kD / 8) + c] = pack_word(codes, c);
    __syncthreads();
  }

  // Values: token t, group of channel c.
  const int gv = l.value_group_size;
  for (int t = 0; t < b; ++t) {
    row[c] = in.value(blk, t, c);
    __syncthreads();
    if (hadamard) {
      const float r = hadamard128_shared(row, c);
      __syncthreads();
      row[c] = r;
      __syncthreads();
    }
    const int g0 = c / gv * gv;
    float vmn = row[g0], vmx = row[g0];
    for (int i = g0 + 1; i < g0 + gv; ++i) {
      vmn = fminf(vmn, row[i]);
      vmx = fmaxf(vmx, row[i]);
    }
    const Params vp = params(vmn, vmx);
    if (c == g0) {
      v_scale[t * (kD / gv) + c / gv] = vp.scale;
      v_zero[t * (kD / gv) + c / gv] = vp.zero;
    }
    codes[c] = static_cast<uint8_t>(code(row[c], vp));
    __syncthreads();
    if (c < kD / 8) v_codes[t * (kD / 8) + c] = pack_word(codes, c);
    __syncthreads();
  }
}

void check_layout(const kv::Int4KiviLayout& l, int64_t num_blocks) {
  S4KV_CHECK(l.head_dim == kD, "int4_kivi quantize: head_dim ", l.head_dim, " (128 only)");
  S4KV_CHECK(num_blocks >= 0 && l.block_size > 0 && l.value_group_size > 0 &&
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
  quantize_kernel<<<static_cast<unsigned>(a.num_blocks), kD, 0, stream>>>(
      in, a.blocks, nullptr, a.layout, a.value_hadamard, nullptr);
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
  quantize_kernel<<<static_cast<unsigned>(a.num_blocks), kD, 0, stream>>>(
      in, a.blocks, a.out_index, a.layout, a.value_hadamard, a.live_blocks);
  S4KV_CUDA_CHECK(cudaGetLastError());
}

}  // namespace s4kv::backend::cuda
