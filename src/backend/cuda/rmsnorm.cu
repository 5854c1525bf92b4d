#include <cuda_bf16.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/rmsnorm.cuh"

namespace s4kv::backend::cuda {
namespace {

constexpr int kThreads = 256;

__device__ float block_sum(float v) {
  __shared__ float warp_sums[kThreads / 32];
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  v = lane < kThreads / 32 ? warp_sums[lane] : 0.0f;
  if (warp == 0) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    if (lane == 0) warp_sums[0] = v;
  }
  __syncthreads();
  return warp_sums[0];
}

// Each thread handles bf16 pairs (hidden_size is even), reading x twice from L1/L2
// instead of keeping a per-thread array, so any hidden size up to 64k works.
__global__ void rmsnorm_kernel(const __nv_bfloat162* __restrict__ x,
                               const __nv_bfloat162* __restrict__ weight, __nv_bfloat162* out,
                               int64_t num_pairs, float inv_hidden, float eps) {
  const int64_t row = blockIdx.x;
  const __nv_bfloat162* xr = x + row * num_pairs;
  float sum_sq = 0.0f;
  for (int64_t i = threadIdx.x; i < num_pairs; i += kThreads) {
    const float2 v = __bfloat1622float2(xr[i]);
    sum_sq += v.x * v.x + v.y * v.y;
  }
  const float inv_rms = rsqrtf(block_sum(sum_sq) * inv_hidden + eps);
  __nv_bfloat162* outr = out + row * num_pairs;
  for (int64_t i = threadIdx.x; i < num_pairs; i += kThreads) {
    const float2 v = __bfloat1622float2(xr[i]);
    const float2 w = __bfloat1622float2(weight[i]);
    outr[i] = __floats2bfloat162_rn(v.x * inv_rms * w.x, v.y * inv_rms * w.y);
  }
}

}  // namespace

void launch_rmsnorm(const RmsnormArgs& args, cudaStream_t stream) {
  S4KV_CHECK(args.x != nullptr && args.weight != nullptr && args.out != nullptr,
             "launch_rmsnorm: null pointer");
  S4KV_CHECK(args.num_tokens >= 0 && args.num_tokens <= (int64_t{1} << 31) - 1,
             "launch_rmsnorm: num_tokens=", args.num_tokens);
  S4KV_CHECK(args.hidden_size > 0 && args.hidden_size % 2 == 0 && args.hidden_size <= 65536,
             "launch_rmsnorm: hidden_size=", args.hidden_size);
  S4KV_CHECK(reinterpret_cast<uintptr_t>(args.x) % 4 == 0 &&
                 reinterpret_cast<uintptr_t>(args.weight) % 4 == 0 &&
                 reinterpret_cast<uintptr_t>(args.out) % 4 == 0,
             "launch_rmsnorm: pointers must be 4-byte aligned");
  if (args.num_tokens == 0) return;
  rmsnorm_kernel<<<static_cast<unsigned>(args.num_tokens), kThreads, 0, stream>>>(
      reinterpret_cast<const __nv_bfloat162*>(args.x),
      reinterpret_cast<const __nv_bfloat162*>(args.weight),
      reinterpret_cast<__nv_bfloat162*>(args.out), args.hidden_size / 2,
      1.0f / static_cast<float>(args.hidden_size), args.eps);
  S4KV_CUDA_CHECK(cudaGetLastError());
}

}  // namespace s4kv::backend::cuda
