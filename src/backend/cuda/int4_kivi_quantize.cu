// launch_int4_kivi_quantize (int4_kivi_quantize.cuh). Thread c of a block owns key channel c
// and value channel c; the value rows go one token at a time through shared memory (Hadamard
// stages, group min/max, codes), and threads 0..D/8-1 pack each token's code words.
#include <cuda_fp16.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/int4_kivi_quantize.cuh"
#include "kv/hadamard.h"

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

__global__ void quantize_kernel(const float* keys, const float* values, std::byte* blocks,
                                kv::Int4KiviLayout l, bool hadamard) {
  __shared__ float row[kD];
  __shared__ uint8_t codes[kD];
  const int c = threadIdx.x;
  const int b = l.block_size;
  const size_t blk = blockIdx.x;
  const float* k = keys + blk * b * kD;
  const float* v = values + blk * b * kD;
  std::byte* out = blocks + blk * l.block_bytes;
  auto* k_codes = reinterpret_cast<uint32_t*>(out + l.k_codes_offset);
  auto* v_codes = reinterpret_cast<uint32_t*>(out + l.v_codes_offset);
  auto* k_scale = reinterpret_cast<uint16_t*>(out + l.k_scale_offset);
  auto* k_zero = reinterpret_cast<uint16_t*>(out + l.k_zero_offset);
  auto* v_scale = reinterpret_cast<uint16_t*>(out + l.v_scale_offset);
  auto* v_zero = reinterpret_cast<uint16_t*>(out + l.v_zero_offset);

  // Keys: channel c over the block's tokens.
  float mn = k[c], mx = k[c];
  for (int t = 1; t < b; ++t) {
    mn = fminf(mn, k[t * kD + c]);
    mx = fmaxf(mx, k[t * kD + c]);
  }
  const Params kp = params(mn, mx);
  k_scale[c] = kp.scale;
  k_zero[c] = kp.zero;
  for (int t = 0; t < b; ++t) {
    codes[c] = static_cast<uint8_t>(code(k[t * kD + c], kp));
    __syncthreads();
    if (c < kD / 8) k_codes[t * (kD / 8) + c] = pack_word(codes, c);
    __syncthreads();
  }

  // Values: token t, group of channel c.
  const int gv = l.value_group_size;
  for (int t = 0; t < b; ++t) {
    row[c] = v[t * kD + c];
    __syncthreads();
    if (hadamard) {
      for (int h = 1; h < kD; h *= 2) {
        float a = 0, x = 0;
        const bool low = (c & h) == 0;  // c is j (low) or j + h (high) of its butterfly
        a = row[low ? c : c - h];
        x = row[low ? c + h : c];
        __syncthreads();
        row[c] = low ? __fadd_rn(a, x) : __fsub_rn(a, x);
        __syncthreads();
      }
      row[c] = __fmul_rn(row[c], kv::kHadamardScale128);
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

}  // namespace

void launch_int4_kivi_quantize(const Int4KiviQuantizeArgs& a, cudaStream_t stream) {
  S4KV_CHECK(a.layout.head_dim == kD, "int4_kivi quantize: head_dim ", a.layout.head_dim,
             " (128 only)");
  S4KV_CHECK(a.num_blocks >= 0 && a.layout.block_size > 0 && a.layout.value_group_size > 0 &&
                 kD % a.layout.value_group_size == 0 && a.layout.block_bytes % 4 == 0,
             "int4_kivi quantize: bad layout or count");
  if (a.num_blocks == 0) return;
  S4KV_CHECK(a.keys != nullptr && a.values != nullptr && a.blocks != nullptr,
             "int4_kivi quantize: null buffer");
  quantize_kernel<<<static_cast<unsigned>(a.num_blocks), kD, 0, stream>>>(
      a.keys, a.values, a.blocks, a.layout, a.value_hadamard);
  S4KV_CUDA_CHECK(cudaGetLastError());
}

}  // namespace s4kv::backend::cuda
