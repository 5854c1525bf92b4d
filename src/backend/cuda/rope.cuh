// Rotary position embedding on the device, rotate-half layout (channel i pairs with i + D/2),
// from the shared RoPE table (backend/rope_table.h): out[i] = x1*c - x2*s, out[i+h] = x2*c +
// x1*s, each product rounded to fp32 before the sum (explicit _rn intrinsics, no FMA), so the
// result equals rope_rotate's (and rope_ref's) bit for bit. In place on fp32 rows of any number
// of heads. One thread per channel pair. Tested against rope_rotate.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace s4kv::backend::cuda {

struct RopeArgs {
  // [num_tokens, row_stride] fp32, device, in place: heads 0..num_heads-1 at the start of a row
  float* x = nullptr;
  int64_t row_stride = 0;              // 0: num_heads * head_dim
  const int32_t* positions = nullptr;  // [num_tokens], device
  const float* cos = nullptr;          // [num_positions, head_dim / 2] RopeTable::cos_table()
  const float* sin = nullptr;          // [num_positions, head_dim / 2]
  int64_t num_tokens = 0;
  int64_t num_heads = 0;
  int64_t head_dim = 0;  // even, <= 1024
};

// Checks the shapes (aborting on a bug) and launches on stream. Positions must be below the
// table's rows (not checked on the device).
void launch_rope(const RopeArgs& args, cudaStream_t stream);

#if defined(__CUDACC__) || defined(S4KV_CUDA_EMULATION)
// One channel pair (x1: channel i, x2: channel i + D/2) turned by (c, s) with rope_rotate's
// roundings; launch_rope's kernel and launch_rope_kv_write's (forward_kernels.cuh) share it.
__device__ __forceinline__ void rope_turn(float& x1, float& x2, float c, float s) {
  const float a = __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s));
  const float b = __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
  x1 = a;
  x2 = b;
}
#endif

}  // namespace s4kv::backend::cuda
