// The normalized 128-point Walsh-Hadamard transform of one row, as a device function for kernels
// of 128 threads (thread c owns channel c): kv::hadamard_ref's stages h = 1, 2, ..., 64 of
// (a+b, a-b) butterflies, then the fp32(1/sqrt(128)) product, each step rounded on its own, so
// the result is bit for bit the CPU's. Stages 1..16 pair lanes of one warp (shuffles), stages
// 32 and 64 pass through row[] (128 floats of shared memory, left holding stage 32's values).
// Every thread of the block must call it (it synchronizes); channel c's scaled value is returned.
#pragma once

#include "kv/hadamard.h"

namespace s4kv::backend::cuda {

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

}  // namespace s4kv::backend::cuda
