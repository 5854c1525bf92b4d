// The normalized 128-point Walsh-Hadamard transform of one row, as device functions: for kernels
// of 128 threads (hadamard128) and for a warp (hadamard128_warp). Both are kv::hadamard_ref's
// stages h = 1, 2, ..., 64 of (a+b, a-b) butterflies, then the fp32(1/sqrt(128)) product, each
// step rounded on its own, so the result is bit for bit the CPU's.
#pragma once

#include "kv/hadamard.h"

namespace s4kv::backend::cuda {

// Thread c of the block owns channel c. Stages 1..16 pair lanes of one warp (shuffles), stages 32
// and 64 pass through row[] (128 floats of shared memory, left holding stage 32's values). Every
// thread of the block must call it (it synchronizes); channel c's scaled value is returned.
__device__ inline float hadamard128(float v, float* row, int c) {
  // c is j (low: a + b) or j + h (high: a - b) of its butterfly, a the low channel's value.
  for (int h = 1; h < 32; h *= 2) {
    const float x = __shfl_xor_sync(0xffffffffu, v, h);
    v = (c & h) == 0 ? __fadd_rn(v, x) : __fsub_rn(x, v);
  }
  for (int h = 32; h < 128; h *= 2) {
    row[c] = v;
    __syncthreads();
    const float x = row[c ^ h];
    __syncthreads();  // read before the next stage writes
    v = (c & h) == 0 ? __fadd_rn(v, x) : __fsub_rn(x, v);
  }
  return __fmul_rn(v, kv::kHadamardScale128);
}

// The same transform of one row held by a warp, four channels a lane: y[u] is channel
// 2 lane + u % 2 + 64 (u / 2). Stage 1 pairs u and u ^ 1 and stage 64 u and u ^ 2 within the
// lane, stages 2..32 lane and lane ^ (h / 2) by shuffles; the same roundings, so bit for bit the
// CPU's too. Every lane of the warp must call it; y becomes the scaled transform.
__device__ inline void hadamard128_warp(float (&y)[4], int lane) {
  auto in_lane = [&](int mask) {
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      if ((u & mask) != 0) continue;
      const float x0 = y[u], x1 = y[u | mask];
      y[u] = __fadd_rn(x0, x1);
      y[u | mask] = __fsub_rn(x0, x1);
    }
  };
  in_lane(1);
  for (int h = 2; h < 64; h *= 2) {
    const bool high = (lane & (h / 2)) != 0;
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const float x = __shfl_xor_sync(0xffffffffu, y[u], h / 2);
      y[u] = high ? __fsub_rn(x, y[u]) : __fadd_rn(y[u], x);
    }
  }
  in_lane(2);
#pragma unroll
  for (int u = 0; u < 4; ++u) y[u] = __fmul_rn(y[u], kv::kHadamardScale128);
}

}  // namespace s4kv::backend::cuda
