// launch_rope (rope.cuh): one thread block per (token, head), one thread per channel pair.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/rope.cuh"

namespace s4kv::backend::cuda {
namespace {

__global__ void rope_kernel(float* x, const int32_t* positions, const float* cos, const float* sin,
                            int num_heads, int head_dim, int64_t row_stride) {
  allow_dependent_launch();
  grid_dependency_wait();
  const int half = head_dim / 2;
  const int i = threadIdx.x;
  const int64_t token = blockIdx.x / num_heads;
  float* row = x + token * row_stride + (blockIdx.x % num_heads) * static_cast<int64_t>(head_dim);
  const int64_t pos = positions[token];
  const float c = cos[pos * half + i], s = sin[pos * half + i];
  float x1 = row[i], x2 = row[i + half];
  rope_turn(x1, x2, c, s);
  row[i] = x1;
  row[i + half] = x2;
}

}  // namespace

void launch_rope(const RopeArgs& a, cudaStream_t stream) {
  S4KV_CHECK(a.num_tokens >= 0 && a.num_heads > 0 && a.head_dim > 0 && a.head_dim % 2 == 0 &&
                 a.head_dim <= 1024,
             "rope: tokens ", a.num_tokens, " heads ", a.num_heads, " head_dim ", a.head_dim);
  if (a.num_tokens == 0) return;
  S4KV_CHECK(a.x != nullptr && a.positions != nullptr && a.cos != nullptr && a.sin != nullptr,
             "rope: null buffer");
  const int64_t rows = a.num_tokens * a.num_heads;
  const int64_t stride = a.row_stride != 0 ? a.row_stride : a.num_heads * a.head_dim;
  S4KV_CHECK(stride >= a.num_heads * a.head_dim, "rope: row stride ", stride);
  S4KV_CHECK(rows <= 0x7fffffff, "rope: too many rows");
  launch_dependent(rope_kernel, static_cast<unsigned>(rows), static_cast<unsigned>(a.head_dim / 2),
                   0, stream, a.x, a.positions, a.cos, a.sin, static_cast<int>(a.num_heads),
                   static_cast<int>(a.head_dim), stride);
  S4KV_CUDA_CHECK(cudaGetLastError());
}

}  // namespace s4kv::backend::cuda
