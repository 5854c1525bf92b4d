// Device helpers of the tensor-core attention kernels (decode_attention.cu, decode_int4.cu,
// prefill_attention.cu): 16-bit pair packing, the m16n8k16 MMA with fp32 accumulation, the 8x8
// fragment transpose and loads, cp.async (sm_80+), ex2 and the exact fp8_e4m3 pair widening. Each
// is one PTX instruction or a conversion intrinsic.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <cstring>

namespace s4kv::backend::cuda {

// Two fp32 values rounded (nearest even) to a bf16 or fp16 pair, lo in the low half.
template <bool kBf16>
__device__ inline uint32_t pack2(float lo, float hi) {
  uint32_t out;
  if constexpr (kBf16) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    memcpy(&out, &h, 4);
  } else {
    const __half2 h = __floats2half2_rn(lo, hi);
    memcpy(&out, &h, 4);
  }
  return out;
}

#ifndef S4KV_CUDA_EMULATION  // emulation.h has these on the CPU
// c += A B (mma.sync m16n8k16, row-major A, column-major B, fp32 accumulation), A and B bf16
// or fp16 in the PTX fragment layout.
template <bool kBf16>
__device__ inline void mma_m16n8k16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  if constexpr (kBf16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// The 8x8 16-bit matrix held by the warp in the fragment layout (lane 4 r + i: row r, columns
// 2i and 2i + 1, the lower column in the low half) transposed, in the same layout
// (movmatrix, sm_75+).
__device__ inline uint32_t transpose8x8_b16(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

// Four 8x8 16-bit matrices from shared memory in the fragment layout (ldmatrix .x4): lane l gives
// the address of row l % 8 of matrix l / 8 (16 bytes), d[j] is matrix j's fragment (element pair
// (row l / 4, columns 2 (l % 4), + 1)); _trans gives each matrix transposed. The address as a
// shared-memory offset, or as a generic pointer into shared memory.
__device__ inline void ldmatrix_x4(uint32_t (&d)[4], uint32_t smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
               : "r"(smem)
               : "memory");
}
__device__ inline void ldmatrix_x4_trans(uint32_t (&d)[4], uint32_t smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
               : "r"(smem)
               : "memory");
}
#endif
__device__ inline void ldmatrix_x4(uint32_t (&d)[4], const uint16_t* row) {
  ldmatrix_x4(d, static_cast<uint32_t>(__cvta_generic_to_shared(row)));
}
__device__ inline void ldmatrix_x4_trans(uint32_t (&d)[4], const uint16_t* row) {
  ldmatrix_x4_trans(d, static_cast<uint32_t>(__cvta_generic_to_shared(row)));
}

#ifndef S4KV_CUDA_EMULATION
// 16 bytes global -> shared, asynchronously; groups committed, then waited for until at most
// kPending are in flight.
__device__ inline void cp_async16(void* smem, const void* gmem) {
  const auto s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
// The same with the destination as a shared-memory address (__cvta_generic_to_shared).
__device__ inline void cp_async16_shared(uint32_t smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem), "l"(gmem) : "memory");
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ inline void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// 2^x, approximate (ex2.approx.ftz), for the online softmax.
__device__ inline float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

#endif

// Two fp8_e4m3 bytes (bits 0..15) as an fp16 pair (exact).
__device__ inline uint32_t fp8x2_to_f16x2(uint32_t x) {
  const __half2_raw h =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(x & 0xffffu), __NV_E4M3);
  uint32_t out;
  memcpy(&out, &h, 4);
  return out;
}

}  // namespace s4kv::backend::cuda
