// The bulk tensor copy engine (TMA, sm_90) and the shared-memory barriers its copies complete
// on: one thread copies a whole box of a tensor (described by a tensor map) into shared memory,
// 16-byte chunks swizzled, and every thread that reads it waits on the stage's barrier. The
// int4_kivi decode kernel (decode_int4.cu) streams its pool blocks so. Emulation.h has the same
// device functions on the CPU; device.cu and the emulation tests' emulated_device.cc the host
// encoder.
#pragma once

#include <cuda.h>  // CUtensorMap (a type; the driver's functions come through the runtime)

#include <cstdint>

namespace s4kv::backend::cuda {

// A map of a rank-dimensional tensor of bytes at `base` (16-byte aligned): dims[0] bytes
// contiguous, dimension d + 1 strides[d] bytes apart (multiples of 16), copied by boxes of box[d]
// elements a dimension (box[0] <= 64 and a multiple of 16, every box[d] <= 256), each landing in
// shared memory as box[0]-byte rows in order with the 64-byte swizzle: the 16-byte chunk c of the
// row at shared-memory byte offset o (from a 512-byte-aligned box) goes to chunk
// c ^ ((o / 128) % 4) (bulk_copy_swizzle64).
void encode_byte_tensor_map(CUtensorMap* map, const void* base, int rank, const uint64_t* dims,
                            const uint64_t* strides, const uint32_t* box);

// Whether kernels may copy with the engine: device 0 is sm_90 or later and S4KV_INT4_COPY is not
// "async" (which keeps them on cp.async, for a measurement; read once). A kernel also needs sm_90
// machine code (decode_int4.cu checks its own).
bool bulk_copy_enabled();

// Where the 64-byte swizzle puts byte offset `offset` of a box (from its 512-byte-aligned start).
__host__ __device__ constexpr int bulk_copy_swizzle64(int offset) {
  return offset ^ (((offset >> 7) & 3) << 4);
}

#ifndef S4KV_CUDA_EMULATION  // emulation.h has these on the CPU
// An mbarrier at shared address `bar` expecting `count` arrivals a phase; made visible to the
// copy engine before any copy names it (then a __syncthreads for the block's other threads).
__device__ inline void mbarrier_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ inline void mbarrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\nfence.proxy.async.shared::cta;\n" ::
                   : "memory");
}
// This thread's arrival, announcing `bytes` more that copies will deliver in this phase.
__device__ inline void mbarrier_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
// Waits until the phase of parity `parity` of the barrier has completed (its copies landed and
// visible to this thread).
__device__ inline void mbarrier_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nwait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// The box at coordinates c0..c4 of a rank-5 map into shared memory at `dst` (512-byte
// aligned), its bytes completing on `bar` (announced there by mbarrier_arrive_expect_tx).
__device__ inline void bulk_copy_5d(uint32_t dst, const CUtensorMap* map, int c0, int c1, int c2,
                                    int c3, int c4, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], "
      "[%1, {%2, %3, %4, %5, %6}], [%7];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4), "r"(bar)
      : "memory");
}
// `bytes` contiguous bytes at `src` (global memory; both 16-byte aligned, bytes a multiple of
// 16) into shared memory at `dst` as they are (no swizzle), completing on `bar`.
__device__ inline void bulk_copy_1d(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
          "r"(dst),
      "l"(reinterpret_cast<uint64_t>(src)), "r"(bytes), "r"(bar)
      : "memory");
}
#endif

}  // namespace s4kv::backend::cuda
