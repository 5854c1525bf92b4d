// A timeline of one decode attention launch, for measurement builds only (nvcc
// -DS4KV_DECODE_TIMELINE: `ATTN_NVCC_FLAGS=-DS4KV_DECODE_TIMELINE tools/device_attention.sh build
// TAG`, then cuda_attention_bench --timeline). Thread 0 of every thread block of the int4_kivi,
// row and merge kernels records the device's nanosecond clock (%globaltimer) at the marks below,
// with its multiprocessor, so that where the fixed part of a launch goes (the prologue's loads,
// the first blocks' wait, blocks ending apart, row blocks waiting for slots, the merge after
// them) is read from the records instead of inferred from totals. Without the macro every mark is
// nothing and the kernels are unchanged. CI compiles the measurement build to PTX (the test
// cuda_timeline_build, target cuda_timeline_ptx).
#pragma once

#include <cstdint>

#include "backend/cuda/cuda_check.h"

namespace s4kv::backend::cuda {

// The marks (TimelineRecord::t): entry, the first copies issued (int4_kivi), the main loop's
// start, the first block landed (int4_kivi), the loop's end, exit.
enum TimelineMark : int {
  kMarkEntry = 0,
  kMarkIssued = 1,
  kMarkLoop = 2,
  kMarkFirst = 3,
  kMarkLoopEnd = 4,
  kMarkExit = 5,
  kMarks = 6
};
struct TimelineRecord {
  unsigned long long t[kMarks];  // ns; 0: not reached
  int32_t kernel;                // TimelineKernel
  int32_t sm;
  int32_t x, y;  // blockIdx
};
enum TimelineKernel : int32_t { kTimelineInt4 = 0, kTimelineRows = 1, kTimelineMerge = 2 };
struct Timeline {
  TimelineRecord* records = nullptr;
  unsigned* next = nullptr;  // the next free record (zeroed before the launch)
  unsigned capacity = 0;
};

#if defined(S4KV_DECODE_TIMELINE)
// Where the kernels of decode_int4.cu and decode_attention.cu record (each translation unit has
// its own copy of the device variable; a Timeline without records turns it off).
void attach_decode_timeline_int4(const Timeline& t);
void attach_decode_timeline_rows(const Timeline& t);
inline void attach_decode_timeline(const Timeline& t) {
  attach_decode_timeline_int4(t);
  attach_decode_timeline_rows(t);
}
#endif

}  // namespace s4kv::backend::cuda

#if defined(S4KV_DECODE_TIMELINE) && defined(__CUDACC__)
namespace s4kv::backend::cuda {
namespace {
__device__ Timeline g_decode_timeline;

__device__ __forceinline__ unsigned long long timeline_ns() {
  unsigned long long t = 0;
#if defined(__CUDA_ARCH__)
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
#endif
  return t;
}

__device__ __forceinline__ TimelineRecord* timeline_begin(int32_t kernel) {
  const Timeline tl = g_decode_timeline;
  if (threadIdx.x != 0 || tl.records == nullptr) return nullptr;
  const unsigned long long t0 = timeline_ns();
  const unsigned slot = atomicAdd(tl.next, 1u);
  if (slot >= tl.capacity) return nullptr;
  TimelineRecord* rec = tl.records + slot;
  unsigned sm = 0;
#if defined(__CUDA_ARCH__)
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
#endif
  rec->t[0] = t0;
  rec->kernel = kernel;
  rec->sm = static_cast<int32_t>(sm);
  rec->x = static_cast<int32_t>(blockIdx.x);
  rec->y = static_cast<int32_t>(blockIdx.y);
  return rec;
}

__device__ __forceinline__ void timeline_mark(TimelineRecord* rec, int i) {
  if (rec != nullptr) rec->t[i] = timeline_ns();
}

inline void attach_timeline_here(const Timeline& t) {
  S4KV_CUDA_CHECK(cudaMemcpyToSymbol(g_decode_timeline, &t, sizeof(t)));
}
}  // namespace
}  // namespace s4kv::backend::cuda
#define S4KV_TIMELINE_BEGIN(kernel)                           \
  ::s4kv::backend::cuda::TimelineRecord* const timeline_rec = \
      ::s4kv::backend::cuda::timeline_begin(kernel)
#define S4KV_TIMELINE_MARK(i) ::s4kv::backend::cuda::timeline_mark(timeline_rec, i)
#define S4KV_TIMELINE_MARK_IF(cond, i) \
  do {                                 \
    if (cond) S4KV_TIMELINE_MARK(i);   \
  } while (0)
#else
#define S4KV_TIMELINE_BEGIN(kernel) static_cast<void>(0)
#define S4KV_TIMELINE_MARK(i) static_cast<void>(0)
#define S4KV_TIMELINE_MARK_IF(cond, i) static_cast<void>(0)
#endif
