// S4KV_CUDA_CHECK: the error tier for CUDA runtime calls. Aborts with the error name.
#pragma once

#include <cuda_runtime.h>

#include "common/check.h"

#define S4KV_CUDA_CHECK(expr)                                                            \
  do {                                                                                   \
    cudaError_t s4kv_err_ = (expr);                                                      \
    S4KV_CHECK(s4kv_err_ == cudaSuccess, #expr, ": ", cudaGetErrorName(s4kv_err_), " (", \
               cudaGetErrorString(s4kv_err_), ")");                                      \
  } while (0)
