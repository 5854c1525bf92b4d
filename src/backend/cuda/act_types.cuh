// The compute dtype's element types on the device (fp32, bf16, fp16): conversions from and to
// fp32 (round to nearest even) and the host-side switch that instantiates a kernel for the
// element type of a DType. Shared by the forward kernels and attention.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/check.h"
#include "common/dtype.h"

namespace s4kv::backend::cuda {

// Activation element types by DType.
template <typename T>
__device__ inline float to_f32(T x);
template <>
__device__ inline float to_f32<float>(float x) {
  return x;
}
template <>
__device__ inline float to_f32<__nv_bfloat16>(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
template <>
__device__ inline float to_f32<__half>(__half x) {
  return __half2float(x);
}
template <typename T>
__device__ inline T from_f32(float x);
template <>
__device__ inline float from_f32<float>(float x) {
  return x;
}
template <>
__device__ inline __nv_bfloat16 from_f32<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ inline __half from_f32<__half>(float x) {
  return __float2half_rn(x);
}

// Calls f(T{}) with T the element type of an activation dtype.
template <typename F>
void with_act_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kF32:
      f(float{});
      return;
    case DType::kBF16:
      f(__nv_bfloat16{});
      return;
    case DType::kF16:
      f(__half{});
      return;
    default:
      S4KV_CHECK(false, "cuda: activation dtype ", dtype_name(dtype));
  }
}

}  // namespace s4kv::backend::cuda
