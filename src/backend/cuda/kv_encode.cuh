// How the forward pass stores a K or V value (fp32) in the paged caches and int4_kivi's staging
// (KvStore, forward_kernels.cuh): the 16-bit dtype's bits (round to nearest even, as the CPU's
// kv_encode), or E4M3 of the 16-bit value the model holds (satfinite, as the CPU's fp8 cache).
// Shared by launch_kv_write, launch_rope_kv_write (forward_kernels.cu) and the few-row GEMM's
// epilogues (skinny_gemm.cu).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "backend/cuda/forward_kernels.cuh"

namespace s4kv::backend::cuda {

// x's 16-bit bits (bf16 or fp16), rounded to nearest even.
__device__ inline uint16_t encode16(float x, bool bf16) {
  return bf16 ? __bfloat16_as_ushort(__float2bfloat16_rn(x)) : __half_as_ushort(__float2half_rn(x));
}

__device__ inline uint8_t encode_kv_fp8(float x, bool from_bf16) {
  const float x16 =
      from_bf16 ? __bfloat162float(__float2bfloat16_rn(x)) : __half2float(__float2half_rn(x));
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(x16, __NV_SATFINITE, __NV_E4M3));
}

// cache[i] = x as `store` holds it (16-bit or byte elements).
__device__ inline void store_kv(void* cache, KvStore store, int64_t i, float x) {
  switch (store) {
    case KvStore::kBf16:
    case KvStore::kF16:
      static_cast<uint16_t*>(cache)[i] = encode16(x, store == KvStore::kBf16);
      break;
    case KvStore::kFp8FromBf16:
    case KvStore::kFp8FromF16:
      static_cast<uint8_t*>(cache)[i] = encode_kv_fp8(x, store == KvStore::kFp8FromBf16);
      break;
  }
}

}  // namespace s4kv::backend::cuda
