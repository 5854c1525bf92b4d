// The normalized 128-point Walsh-Hadamard transform of one row held in shared memory, as a
// device function for kernels of 128 threads (thread c owns channel c): kv::hadamard_ref's
// stages h = 1, 2, ..., 64 of (a+b, a-b) butterflies, then the fp32(1/sqrt(128)) product, each
// step rounded on its own, so the result is bit for bit the CPU's. Every thread of the block
// must call it (it synchronizes); the scaled value of channel c is returned, row[] is left
// unscaled.
#pragma once

#include "kv/hadamard.h"

namespace s4kv::backend::cuda {

__device__ inline float hadamard128_shared(float* row, int c) {
  for (int h = 1; h < 128; h *= 2) {
    const bool low = (c & h) == 0;  // c is j (low) or j + h (high) of its butterfly
    const float a = row[low ? c : c - h], x = row[low ? c + h : c];
    __syncthreads();
    row[c] = low ? __fadd_rn(a, x) : __fsub_rn(a, x);
    __syncthreads();
  }
  return __fmul_rn(row[c], kv::kHadamardScale128);
}

}  // namespace s4kv::backend::cuda
