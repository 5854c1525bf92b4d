// Programmatic dependent launch (sm_90 and later): a kernel launched by launch_dependent may
// start while the kernel before it in the stream still runs, so its launch and whatever it reads
// that no kernel writes (weights) overlap the earlier kernel's tail. Such a kernel calls
// grid_dependency_wait() in every thread block before anything else touches memory an earlier
// kernel writes or reads, and before any early return (a grid that ends without waiting could
// end before the kernel it follows, and the next kernel's wait would then not cover that one).
// allow_dependent_launch() lets the next kernel's thread blocks launch once every block of this
// one has called it. Captured into CUDA graphs as programmatic edges. On sm_90 and later the
// few-row GEMMs launch so by default (their first weight loads are issued before the wait, under
// the small kernel before them: the batch-1 decode step 0.03 ms shorter on the H200);
// S4KV_PDL=1 makes every such launch dependent (measured slower: docs/gpu_end_to_end.md),
// S4KV_PDL=0 none.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "backend/cuda/cuda_check.h"

// A kernel's dynamic shared memory: S4KV_DYNAMIC_SHARED(smem); declares unsigned char smem[]
// (emulation.h, which the CPU builds of the kernels include first, has its own).
#ifndef S4KV_CUDA_EMULATION
#define S4KV_DYNAMIC_SHARED(name) extern __shared__ __align__(16) unsigned char name[]
#endif

namespace s4kv::backend::cuda {

__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void allow_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

enum class LaunchKind { kKernel, kGemm };

// Device 0 is sm_90 or later and S4KV_PDL asks for launches of this kind (read once).
bool dependent_launch_enabled(LaunchKind kind);

// kernel<<<grid, block, smem, stream>>>(args...) (on the CPU under S4KV_CUDA_EMULATION).
template <typename... Params, typename... Args>
void launch_plain(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                  cudaStream_t stream, Args&&... args) {
#ifdef S4KV_CUDA_EMULATION
  (void)stream;
  emu::launch(kernel, grid, block, smem, std::tuple<Params...>(static_cast<Params>(args)...));
#else
  // (clang-format would split the >>> of a launch in a .cuh)
  // clang-format off
  kernel<<<grid, block, smem, stream>>>(static_cast<Params>(args)...);
  // clang-format on
#endif
}

// kernel<<<grid, block, smem, stream>>>(args...), launched programmatically dependent on the
// stream's previous kernel where enabled for `kind`. The kernel must follow the rules above.
template <typename... Params, typename... Args>
void launch_dependent_as(LaunchKind kind, void (*kernel)(Params...), dim3 grid, dim3 block,
                         size_t smem, cudaStream_t stream, Args&&... args) {
#ifdef S4KV_CUDA_EMULATION
  (void)kind;  // the CPU runs launches one after another
  launch_plain(kernel, grid, block, smem, stream, std::forward<Args>(args)...);
#else
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = dependent_launch_enabled(kind) ? 1 : 0;
  S4KV_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, static_cast<Params>(args)...));
#endif
}

template <typename... Params, typename... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                      cudaStream_t stream, Args&&... args) {
  launch_dependent_as(LaunchKind::kKernel, kernel, grid, block, smem, stream,
                      std::forward<Args>(args)...);
}

}  // namespace s4kv::backend::cuda
