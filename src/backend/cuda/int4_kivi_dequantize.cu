// launch_int4_kivi_dequantize and launch_hadamard128_rows (int4_kivi_dequantize.cuh).
#include <cuda_fp16.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/hadamard.cuh"
#include "backend/cuda/int4_kivi_dequantize.cuh"
#include "backend/cuda/int4_kivi_device.cuh"
#include "backend/cuda/launch.cuh"

namespace s4kv::backend::cuda {
namespace {

constexpr int kD = 128;

__global__ void dequantize_kernel(const std::byte* blocks, float* keys, float* values,
                                  kv::Int4KiviLayout l) {
  const int c = threadIdx.x;
  const size_t blk = blockIdx.x;
  const int b = l.block_size;
  const std::byte* in = blocks + blk * l.block_bytes;
  const auto* k_codes = reinterpret_cast<const uint32_t*>(in + l.k_codes_offset);
  const auto* v_codes = reinterpret_cast<const uint32_t*>(in + l.v_codes_offset);
  const float ks = fp16_at(in + l.k_scale_offset, c), kz = fp16_at(in + l.k_zero_offset, c);
  const int groups = kD / l.value_group_size;
  for (int t = 0; t < b; ++t) {
    const size_t out = (blk * b + t) * kD + c;
    keys[out] = dequant_int4(k_codes + t * (kD / 8), c, ks, kz);
    const size_t g = static_cast<size_t>(t) * groups + c / l.value_group_size;
    values[out] = dequant_int4(v_codes + t * (kD / 8), c, fp16_at(in + l.v_scale_offset, g),
                               fp16_at(in + l.v_zero_offset, g));
  }
}

// One row per thread block, one channel per thread; the stages through shared memory.
__global__ void hadamard_kernel(float* rows) {
  __shared__ float row[kD];
  const int c = threadIdx.x;
  float* r = rows + blockIdx.x * static_cast<size_t>(kD);
  r[c] = hadamard128(r[c], row, c);
}

}  // namespace

void launch_int4_kivi_dequantize(const Int4KiviDequantizeArgs& a, cudaStream_t stream) {
  S4KV_CHECK(a.layout.head_dim == kD && a.layout.block_size > 0 && a.layout.value_group_size > 0 &&
                 kD % a.layout.value_group_size == 0 && a.num_blocks >= 0,
             "int4_kivi dequantize: bad layout or count");
  if (a.num_blocks == 0) return;
  S4KV_CHECK(a.blocks != nullptr && a.keys != nullptr && a.values != nullptr,
             "int4_kivi dequantize: null buffer");
  launch_plain(dequantize_kernel, static_cast<unsigned>(a.num_blocks), kD, 0, stream, a.blocks,
               a.keys, a.values, a.layout);
  S4KV_CUDA_CHECK(cudaGetLastError());
}

void launch_hadamard128_rows(float* rows, int64_t num_rows, cudaStream_t stream) {
  S4KV_CHECK(num_rows >= 0 && num_rows <= 0x7fffffff, "hadamard: ", num_rows, " rows");
  if (num_rows == 0) return;
  S4KV_CHECK(rows != nullptr, "hadamard: null buffer");
  launch_plain(hadamard_kernel, static_cast<unsigned>(num_rows), kD, 0, stream, rows);
  S4KV_CUDA_CHECK(cudaGetLastError());
}

}  // namespace s4kv::backend::cuda
