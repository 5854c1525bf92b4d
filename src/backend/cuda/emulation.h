// CUDA kernels run on the CPU, for tests on machines without a GPU: with S4KV_CUDA_EMULATION
// defined, a .cu file compiled as C++ (g++) gets here what the CUDA compiler and the GPU would
// give it. Each thread of a thread block is a fiber (its own stack, switched cooperatively on
// the launching host thread; x86-64); a launch runs the grid's blocks one after another. Warp
// collectives (shuffles, votes, mma.sync, movmatrix, ldmatrix) meet at a barrier of the warp's
// 32 threads and compute the PTX ISA's fragment layouts from every lane's registers;
// __syncthreads is a barrier of the block's threads (a fiber waiting at one lets the others
// run; one that no fiber can reach aborts as a deadlock); cp.async copies when its group is
// waited for; a bulk tensor copy (bulk_copy.cuh) when a thread waits on its mbarrier (at once
// under S4KV_EMULATION_GREEDY, below), which completes a phase when its arrivals and announced
// bytes are in. fp16 arithmetic is the host's
// (cuda_fp16.h's host paths, single-rounded), mma.sync accumulates in fp32 in k order and
// ex2.approx is exp2f: close to the GPU, not bit-exact, so tests of emulated kernels hold them to a
// tolerance (or to bytes where the kernel's contract is bit-exact arithmetic, as the int4_kivi
// quantizer's). Not for production builds: nvcc never sees this file (the headers that include it
// do so only when S4KV_CUDA_EMULATION is defined and
// __CUDACC__ is not: the emulation test targets include it first in every file, -include).
#pragma once

#if !defined(S4KV_CUDA_EMULATION) || defined(__CUDACC__)
#error "emulation.h is for host builds with S4KV_CUDA_EMULATION"
#endif

#include <cuda.h>  // CUtensorMap
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "common/check.h"

namespace s4kv::emu {

// A barrier of the fibers of a block or warp: the last arrival opens the next phase; a waiting
// fiber yields to the others (yield, below).
struct FiberBarrier {
  explicit FiberBarrier(int n) : expected(n) {}
  int expected, arrived = 0;
  uint64_t phase = 0;
  void arrive_and_wait();
  // A fiber that returns: it arrives now and is not expected from then on (an exited GPU
  // thread no longer takes part in __syncthreads).
  void arrive_and_drop();
};

struct Warp {
  FiberBarrier bar{32};
  std::array<std::array<std::array<uint32_t, 8>, 32>, 2> slot{};  // two sets, used in turn
};

// A bulk tensor copy not yet landed, and an mbarrier (bulk_copy.cuh): the phase completes when
// `pending` arrivals and `tx` announced bytes have come in.
struct BulkCopy {
  unsigned char* dst;  // the box in shared memory, at shared address dst_address
  uint32_t dst_address;
  std::vector<std::pair<const unsigned char*, size_t>> rows;  // the box's rows, in order
  bool swizzle = true;  // a tensor copy's 64-byte swizzle (bulk_copy_1d: none)
};
struct MBarrier {
  int expected = 0, pending = 0;
  int64_t tx = 0;
  uint64_t phase = 0;
  std::vector<BulkCopy> copies;
};
// A tensor map as emulated_device.cc's encode_byte_tensor_map writes it into a CUtensorMap.
struct TensorMap {
  const unsigned char* base;
  int rank;
  uint64_t dims[5], strides[4];
  uint32_t box[5];
};

struct Block {
  Block(int threads, size_t smem_bytes) : bar(threads), warps((threads + 31) / 32) {
    smem.resize(smem_bytes + 16);
  }
  FiberBarrier bar;
  std::vector<Warp> warps;
  std::vector<unsigned char> smem;
  std::map<uint32_t, MBarrier> mbarriers;  // by shared address
  unsigned char* dynamic() {
    auto p = reinterpret_cast<uintptr_t>(smem.data());
    return reinterpret_cast<unsigned char*>((p + 15) & ~uintptr_t{15});
  }
};

struct Copy {
  unsigned char* dst;
  const void* src;
};

struct Thread {
  dim3 tid, bid, bdim, gdim;
  int lane = 0;
  uint64_t exchanges = 0;  // the warp's collectives so far (every lane counts the same)
  Block* block = nullptr;
  std::vector<std::vector<Copy>> groups;  // committed cp.async groups, oldest first
  std::vector<Copy> open;                 // issued since the last commit
};

inline thread_local Thread* self = nullptr;

inline Warp& warp() { return self->block->warps[self->tid.x / 32]; }

// Every lane's words after each lane has given its own (all 32 lanes call it together).
template <size_t N>
std::array<std::array<uint32_t, N>, 32> exchange(const std::array<uint32_t, N>& mine) {
  static_assert(N <= 8);
  // Collectives alternate between two slot sets: a lane writes this set again two collectives
  // on, past the barrier of the next one, which every lane reaches only after reading this one.
  Warp& w = warp();
  auto& slots = w.slot[self->exchanges++ % 2];
  std::copy(mine.begin(), mine.end(), slots[static_cast<size_t>(self->lane)].begin());
  w.bar.arrive_and_wait();
  std::array<std::array<uint32_t, N>, 32> all;
  for (size_t l = 0; l < 32; ++l) std::copy_n(slots[l].begin(), N, all[l].begin());
  return all;
}

template <typename T>
uint32_t bits(T v) {
  static_assert(sizeof(T) == 4);
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}
template <typename T>
T from_bits(uint32_t u) {
  T v;
  std::memcpy(&v, &u, 4);
  return v;
}

// The 16-bit half h (0 low, 1 high) of a word as fp32 (fp16 or bf16).
inline float half_of(uint32_t w, int h, bool bf16) {
  const auto x = static_cast<uint16_t>(w >> (16 * h));
  if (bf16) return from_bits<float>(uint32_t{x} << 16);
  return __half2float(__ushort_as_half(x));
}

inline unsigned char* shared_at(uint32_t addr) {
  Block* b = self->block;
  S4KV_CHECK(addr < b->smem.size() - 16, "emulated shared address ", addr, " past the block's ",
             b->smem.size() - 16, " bytes");
  return b->dynamic() + addr;
}

// Switches stacks (x86-64 System V): pushes the callee-saved registers, stores the stack
// pointer in *from, loads `to` and pops the registers saved there, returning into that context.
__attribute__((naked, noinline)) inline void switch_context(void** /*from*/, void* /*to*/) {
  asm volatile(
      "pushq %rbp\n\tpushq %rbx\n\tpushq %r12\n\tpushq %r13\n\tpushq %r14\n\tpushq %r15\n\t"
      "movq %rsp, (%rdi)\n\tmovq %rsi, %rsp\n\t"
      "popq %r15\n\tpopq %r14\n\tpopq %r13\n\tpopq %r12\n\tpopq %rbx\n\tpopq %rbp\n\tret\n\t");
}

// The fibers of the block being run.
struct Scheduler {
  static constexpr size_t kStackBytes = 256 * 1024;
  std::vector<Thread> threads;
  std::vector<void*> sp;  // each fiber's saved stack pointer
  std::vector<std::unique_ptr<char[]>> stacks;
  std::vector<char> done;
  // S4KV_EMULATION_GREEDY: what each waiting fiber waits for (true: it can go on).
  std::vector<std::function<bool()>> can_go;
  int cur = 0;
  void* launcher_sp = nullptr;
  uint64_t progress = 0;  // arrivals and returns: what a deadlock lacks
  std::function<void()> body;
};
inline thread_local Scheduler* sched = nullptr;

// The next fiber after cur that has not returned (cur itself when it is the only one).
// S4KV_EMULATION_REVERSE=1 runs the fibers in the other order (the last thread first), so that
// a kernel that counts on one warp reaching a point before another without a barrier between
// them fails under one of the two orders.
inline bool reverse_order() {
  static const bool reverse = [] {
    const char* v = std::getenv("S4KV_EMULATION_REVERSE");
    return v != nullptr && v[0] == '1';
  }();
  return reverse;
}

// S4KV_EMULATION_GREEDY=1 runs each warp as far as it can before another: the next fiber is
// one that can go on, of the current warp first, so that a warp reaches block k + 1 while another
// is still in block k wherever no barrier holds it (a missing one between warps fails).
inline bool greedy_order() {
  static const bool greedy = [] {
    const char* v = std::getenv("S4KV_EMULATION_GREEDY");
    return v != nullptr && v[0] == '1';
  }();
  return greedy;
}

inline int next_fiber() {
  const int n = static_cast<int>(sched->threads.size()), step = reverse_order() ? n - 1 : 1;
  int k = sched->cur;
  if (greedy_order()) {
    auto can_go = [&](int f) {
      const auto& c = sched->can_go[static_cast<size_t>(f)];
      return f != sched->cur && !sched->done[static_cast<size_t>(f)] && (!c || c());
    };
    const int w0 = sched->cur / 32 * 32, width = std::min(n, w0 + 32) - w0;
    for (int d = 1; d < width; ++d) {  // this warp first
      if (can_go(w0 + (sched->cur - w0 + d) % width)) return w0 + (sched->cur - w0 + d) % width;
    }
    for (int d = 1; d < n; ++d) {
      if (can_go((sched->cur + d) % n)) return (sched->cur + d) % n;
    }
  }
  do {
    k = (k + step) % n;
  } while (sched->done[static_cast<size_t>(k)] && k != sched->cur);
  return k;
}

inline void resume(int k, void** save) {
  sched->cur = k;
  self = &sched->threads[static_cast<size_t>(k)];
  switch_context(save, sched->sp[static_cast<size_t>(k)]);
}

// Lets the other fibers run until they reach a barrier or return.
inline void yield() {
  const int from = sched->cur, k = next_fiber();
  if (k == from) return;
  resume(k, &sched->sp[static_cast<size_t>(from)]);
  self = &sched->threads[static_cast<size_t>(from)];
}

// Lets the other fibers run until done() (which may act, as landing copies) holds; under
// S4KV_EMULATION_GREEDY next_fiber asks can_go() (no side effects) whether this fiber could go on.
// Aborts with `stuck` when every fiber waits and none makes progress.
template <typename Done, typename CanGo>
void wait_until(Done done, CanGo can_go, const char* stuck) {
  const size_t fibers = sched->threads.size();
  uint64_t seen = sched->progress;
  size_t idle = 0;
  while (!done()) {
    if (greedy_order()) sched->can_go[static_cast<size_t>(sched->cur)] = can_go;
    yield();
    if (greedy_order()) sched->can_go[static_cast<size_t>(sched->cur)] = nullptr;
    if (sched->progress != seen) {
      seen = sched->progress;
      idle = 0;
    } else {
      S4KV_CHECK(++idle <= fibers + 1, stuck);
    }
  }
}

inline void FiberBarrier::arrive_and_wait() {
  ++sched->progress;
  if (++arrived == expected) {
    arrived = 0;
    ++phase;
    return;
  }
  const uint64_t mine = phase;
  auto opened = [this, mine] { return phase != mine; };
  wait_until(opened, opened, "emulation: a barrier no fiber can reach (deadlock)");
}

inline void FiberBarrier::arrive_and_drop() {
  ++sched->progress;
  if (++arrived == expected) {
    arrived = 0;
    ++phase;
  }
  --expected;
}

[[noreturn]] inline void fiber_main() {
  sched->body();
  self->block->warps[self->tid.x / 32].bar.arrive_and_drop();
  self->block->bar.arrive_and_drop();
  sched->done[static_cast<size_t>(sched->cur)] = 1;
  ++sched->progress;
  void* gone;
  const int k = next_fiber();
  if (k == sched->cur) {
    switch_context(&gone, sched->launcher_sp);  // every fiber has returned
  } else {
    resume(k, &gone);
  }
  __builtin_unreachable();
}

// Runs kernel(params...) over the grid, one thread block at a time, each of its threads a fiber.
template <typename... Params>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
            std::tuple<Params...> params) {
  const int threads = static_cast<int>(block.x * block.y * block.z);
  const int64_t blocks = int64_t{grid.x} * grid.y * grid.z;
  Scheduler s;
  s.threads.resize(static_cast<size_t>(threads));
  s.sp.resize(static_cast<size_t>(threads));
  s.done.resize(static_cast<size_t>(threads));
  s.can_go.resize(static_cast<size_t>(threads));
  for (int t = 0; t < threads; ++t) {
    // Not zeroed: a launch touches only the pages its fibers' frames use.
    s.stacks.push_back(std::make_unique_for_overwrite<char[]>(Scheduler::kStackBytes));
  }
  s.body = [&] { std::apply(kernel, params); };
  Scheduler* const outer = sched;
  sched = &s;
  for (int64_t k = 0; k < blocks; ++k) {
    Block b(threads, smem);
    const dim3 bid(static_cast<unsigned>(k % grid.x), static_cast<unsigned>(k / grid.x % grid.y),
                   static_cast<unsigned>(k / (int64_t{grid.x} * grid.y)));
    for (int t = 0; t < threads; ++t) {
      Thread& me = s.threads[static_cast<size_t>(t)];
      me = Thread{};
      me.tid =
          dim3(static_cast<unsigned>(t) % block.x, static_cast<unsigned>(t) / block.x % block.y,
               static_cast<unsigned>(t) / (block.x * block.y));
      me.bid = bid;
      me.bdim = block;
      me.gdim = grid;
      me.lane = t % 32;
      me.block = &b;
      s.done[static_cast<size_t>(t)] = 0;
      s.can_go[static_cast<size_t>(t)] = nullptr;
      // A fresh stack that "returns" into fiber_main: six zero registers, then its address; the
      // slot above stands for fiber_main's own return address (16-byte alignment as at a call).
      char* top = s.stacks[static_cast<size_t>(t)].get() + Scheduler::kStackBytes;
      auto** frame = reinterpret_cast<void**>((reinterpret_cast<uintptr_t>(top) & ~uintptr_t{15}) -
                                              8 * sizeof(void*));
      for (int r = 0; r < 6; ++r) frame[r] = nullptr;
      frame[6] = reinterpret_cast<void*>(&fiber_main);
      frame[7] = nullptr;
      s.sp[static_cast<size_t>(t)] = frame;
    }
    Thread* const caller = self;
    resume(reverse_order() ? threads - 1 : 0, &s.launcher_sp);
    self = caller;
  }
  sched = outer;
}

}  // namespace s4kv::emu

// The built-in variables and qualifiers nvcc provides.
#define threadIdx (::s4kv::emu::self->tid)
#define blockIdx (::s4kv::emu::self->bid)
#define blockDim (::s4kv::emu::self->bdim)
#define gridDim (::s4kv::emu::self->gdim)
#ifdef __launch_bounds__
#undef __launch_bounds__
#endif
#define __launch_bounds__(...)
#ifdef __grid_constant__
#undef __grid_constant__
#endif
#define __grid_constant__
// Function-scope __shared__ arrays: one per process, which is one per block while blocks run
// one at a time.
#ifdef __shared__
#undef __shared__
#endif
#define __shared__ static
// A kernel's dynamic shared memory (launch.cuh has nvcc's).
#define S4KV_DYNAMIC_SHARED(name) unsigned char* const name = ::s4kv::emu::self->block->dynamic()

inline void __syncthreads() { ::s4kv::emu::self->block->bar.arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { ::s4kv::emu::warp().bar.arrive_and_wait(); }

namespace s4kv::emu {
// Lane `src`'s value of v (4 or 8 bytes, as CUDA's shuffles take).
template <typename T>
T shuffle(T v, int src) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8);
  std::array<uint32_t, 2> w{};
  std::memcpy(w.data(), &v, sizeof(T));
  const auto all = exchange<2>(w);
  T out;
  std::memcpy(&out, all[static_cast<size_t>(src & 31)].data(), sizeof(T));
  return out;
}
}  // namespace s4kv::emu

template <typename T>
T __shfl_xor_sync(unsigned, T v, int lane_mask, int = 32) {
  return ::s4kv::emu::shuffle(v, ::s4kv::emu::self->lane ^ lane_mask);
}
template <typename T>
T __shfl_sync(unsigned, T v, int src, int = 32) {
  return ::s4kv::emu::shuffle(v, src);
}
inline bool __any_sync(unsigned, bool pred) {
  const auto all = ::s4kv::emu::exchange<1>({pred ? 1u : 0u});
  for (const auto& w : all) {
    if (w[0] != 0) return true;
  }
  return false;
}
inline bool __all_sync(unsigned, bool pred) {
  const auto all = ::s4kv::emu::exchange<1>({pred ? 1u : 0u});
  for (const auto& w : all) {
    if (w[0] == 0) return false;
  }
  return true;
}

template <typename T>
T __ldg(const T* p) {
  return *p;
}
template <typename T>
T __ldcg(const T* p) {
  return *p;
}
// One thread runs at a time: memory is seen in program order, an atomic is a plain update.
inline void __threadfence() {}
inline int atomicAdd(int* p, int v) {
  const int old = *p;
  *p = old + v;
  return old;
}
inline size_t __cvta_generic_to_shared(const void* p) {
  const auto* c = static_cast<const unsigned char*>(p);
  const unsigned char* base = ::s4kv::emu::self->block->dynamic();
  S4KV_CHECK(c >= base, "__cvta_generic_to_shared: not in the block's dynamic shared memory");
  return static_cast<size_t>(c - base);
}
inline int __ffs(int x) { return x == 0 ? 0 : __builtin_ctz(static_cast<unsigned>(x)) + 1; }
inline float __uint_as_float(unsigned u) { return ::s4kv::emu::from_bits<float>(u); }
inline unsigned __float_as_uint(float f) { return ::s4kv::emu::bits(f); }
inline float __int_as_float(int i) {
  return ::s4kv::emu::from_bits<float>(static_cast<uint32_t>(i));
}
// Without contraction: the host compiles a * b + c as two roundings only under -ffp-contract=off,
// which the emulation targets use.
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
// PRMT: bytes 0..3 of x then y, picked by the low 3 bits of each of s's 4 low nibbles.
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  const uint64_t v = (uint64_t{y} << 32) | x;
  unsigned out = 0;
  for (int k = 0; k < 4; ++k)
    out |= static_cast<unsigned>((v >> (8 * ((s >> (4 * k)) & 7u))) & 0xffu) << (8 * k);
  return out;
}
// The integer min / max overloads nvcc provides in device code.
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline __half2 __hfma2(__half2 a, __half2 b, __half2 c) {
  const float2 x = __half22float2(a), y = __half22float2(b), z = __half22float2(c);
  return __floats2half2_rn(std::fma(x.x, y.x, z.x), std::fma(x.y, y.y, z.y));
}

// The CUDA runtime calls of the kernels' launchers, as no-ops that succeed (the occupancy
// query answers 3 blocks a multiprocessor).
namespace s4kv::emu {
template <typename... T>
cudaError_t ok(T...) {
  return cudaSuccess;
}
template <typename... T>
cudaError_t occupancy(int* count, T...) {
  *count = 3;
  return cudaSuccess;
}
// A kernel's attributes: compiled for sm_90 (the emulated device has its bulk copy engine).
template <typename F>
cudaError_t func_attributes(cudaFuncAttributes* attr, F) {
  *attr = cudaFuncAttributes{};
  attr->ptxVersion = attr->binaryVersion = 90;
  return cudaSuccess;
}
}  // namespace s4kv::emu
#define cudaFuncSetAttribute(...) ::s4kv::emu::ok(__VA_ARGS__)
#define cudaFuncGetAttributes(...) ::s4kv::emu::func_attributes(__VA_ARGS__)
#define cudaGetLastError() cudaSuccess
#define cudaGetErrorName(e) "emulated"
#define cudaGetErrorString(e) "emulated"
#define cudaOccupancyMaxActiveBlocksPerMultiprocessor(...) ::s4kv::emu::occupancy(__VA_ARGS__)
#define cudaEventRecord(...) ::s4kv::emu::ok(__VA_ARGS__)
// Device memory is host memory (the tests' emulated_device.cc).
#define cudaDeviceSynchronize() cudaSuccess
#define cudaMemset(p, v, n) (std::memset((p), (v), (n)), cudaSuccess)
#define cudaMemcpy(d, s, n, kind) (std::memcpy((d), (s), (n)), cudaSuccess)
#define cudaStreamWaitEvent(...) ::s4kv::emu::ok(__VA_ARGS__)

namespace s4kv::backend::cuda {

// tensor_core.cuh's PTX instructions.
template <bool kBf16>
void mma_m16n8k16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  const auto all = emu::exchange<6>({a[0], a[1], a[2], a[3], b0, b1});
  // A row-major 16 x 16: lane 4 (row % 8) + (col % 8) / 2, register row / 8 + 2 (col / 8);
  // B 16 x 8 (k x n): lane 4 n + (k % 8) / 2, register 4 + k / 8; the half: col % 2, k % 2.
  auto A = [&](int row, int col) {
    return emu::half_of(all[static_cast<size_t>(4 * (row % 8) + (col % 8) / 2)]
                           [static_cast<size_t>(row / 8 + 2 * (col / 8))],
                        col % 2, kBf16);
  };
  auto B = [&](int k, int n) {
    return emu::half_of(
        all[static_cast<size_t>(4 * n + (k % 8) / 2)][static_cast<size_t>(4 + k / 8)], k % 2,
        kBf16);
  };
  const int r = emu::self->lane / 4, i = emu::self->lane % 4;
  for (int j = 0; j < 4; ++j) {
    const int row = r + 8 * (j / 2), col = 2 * i + j % 2;
    float acc = c[j];
    for (int k = 0; k < 16; ++k) acc += A(row, k) * B(k, col);
    c[j] = acc;
  }
}

inline uint32_t transpose8x8_b16(uint32_t x) {
  const auto all = emu::exchange<1>({x});
  const int r = emu::self->lane / 4, i = emu::self->lane % 4;
  // out (r, 2i + e) = in (2i + e, r): lane 4 (2i + e) + r / 2, half r % 2.
  auto in = [&](int e) {
    return (all[static_cast<size_t>(4 * (2 * i + e) + r / 2)][0] >> (16 * (r % 2))) & 0xffffu;
  };
  return in(0) | (in(1) << 16);
}

namespace emu_detail {
// ldmatrix .x4: lane l gives row l % 8 of matrix l / 8.
template <bool kTrans>
void ldmatrix(uint32_t (&d)[4], uint32_t smem) {
  const auto all = emu::exchange<1>({smem});
  const int r = emu::self->lane / 4, i = emu::self->lane % 4;
  auto at = [&](int matrix, int row, int col) {
    uint16_t v;
    std::memcpy(&v, emu::shared_at(all[static_cast<size_t>(8 * matrix + row)][0] + 2 * col), 2);
    return uint32_t{v};
  };
  for (int j = 0; j < 4; ++j) {
    d[j] = kTrans ? at(j, 2 * i, r) | (at(j, 2 * i + 1, r) << 16)
                  : at(j, r, 2 * i) | (at(j, r, 2 * i + 1) << 16);
  }
}
}  // namespace emu_detail

inline void ldmatrix_x4(uint32_t (&d)[4], uint32_t smem) { emu_detail::ldmatrix<false>(d, smem); }
inline void ldmatrix_x4_trans(uint32_t (&d)[4], uint32_t smem) {
  emu_detail::ldmatrix<true>(d, smem);
}

inline void cp_async16_shared(uint32_t smem, const void* gmem) {
  emu::self->open.push_back({emu::shared_at(smem), gmem});
}
inline void cp_async16(void* smem, const void* gmem) {
  cp_async16_shared(static_cast<uint32_t>(__cvta_generic_to_shared(smem)), gmem);
}
inline void cp_async_commit() {
  emu::self->groups.push_back(std::move(emu::self->open));
  emu::self->open.clear();
}
template <int kPending>
void cp_async_wait() {
  auto& groups = emu::self->groups;
  while (groups.size() > static_cast<size_t>(kPending)) {
    for (const emu::Copy& c : groups.front()) std::memcpy(c.dst, c.src, 16);
    groups.erase(groups.begin());
  }
}

inline float fast_exp2(float x) { return std::exp2(x); }

// bulk_copy.cuh's mbarriers and bulk tensor copy.
namespace emu_detail {
inline emu::MBarrier& mbarrier(uint32_t bar) {
  auto& all = emu::self->block->mbarriers;
  const auto it = all.find(bar);
  S4KV_CHECK(it != all.end(), "emulation: mbarrier at ", bar, " not initialized");
  return it->second;
}
inline void mbarrier_complete(emu::MBarrier& m) {
  S4KV_CHECK(m.pending >= 0 && m.tx >= 0, "emulation: mbarrier over-arrived");
  if (m.pending == 0 && m.tx == 0) {
    ++m.phase;
    m.pending = m.expected;
    ++emu::sched->progress;
  }
}
// The copies issued on `m` land (64-byte swizzle, bulk_copy_swizzle64) and their bytes count.
inline void mbarrier_land(emu::MBarrier& m) {
  for (const emu::BulkCopy& c : m.copies) {
    size_t at = 0;
    for (const auto& [src, bytes] : c.rows) {
      for (size_t k = 0; k < bytes; ++k, ++at) {
        // The 64-byte swizzle: bits 4..5 of the shared address ^= bits 7..8.
        const uint32_t a = c.dst_address + static_cast<uint32_t>(at);
        c.dst[(c.swizzle ? a ^ (((a >> 7) & 3u) << 4) : a) - c.dst_address] = src[k];
      }
    }
    m.tx -= static_cast<int64_t>(at);
  }
  m.copies.clear();
  mbarrier_complete(m);
}
// A bulk copy issued on `bar`. Under S4KV_EMULATION_GREEDY it lands now, over whatever a slower
// warp may still read there (a stage reused before every thread is done with it fails);
// otherwise when a thread waits for it (a read before the wait fails).
inline void mbarrier_add_copy(uint32_t bar, emu::BulkCopy copy) {
  emu::MBarrier& m = mbarrier(bar);
  m.copies.push_back(std::move(copy));
  if (emu::greedy_order()) mbarrier_land(m);
}
}  // namespace emu_detail

inline void mbarrier_init(uint32_t bar, uint32_t count) {
  emu::MBarrier& m = emu::self->block->mbarriers[bar];
  m = emu::MBarrier{};
  m.expected = m.pending = static_cast<int>(count);
}
inline void mbarrier_init_fence() {}
inline void mbarrier_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  emu::MBarrier& m = emu_detail::mbarrier(bar);
  m.tx += bytes;
  --m.pending;
  emu_detail::mbarrier_complete(m);
}
inline void mbarrier_wait(uint32_t bar, uint32_t parity) {
  emu::wait_until(
      [bar, parity] {  // the copies issued on it land when a thread waits
        emu::MBarrier& m = emu_detail::mbarrier(bar);
        emu_detail::mbarrier_land(m);
        return (m.phase & 1) != parity;
      },
      [bar, parity] {
        const emu::MBarrier& m = emu_detail::mbarrier(bar);
        return !m.copies.empty() || (m.phase & 1) != parity;
      },
      "emulation: an mbarrier phase that never completes");
}
inline void bulk_copy_5d(uint32_t dst, const CUtensorMap* map, int c0, int c1, int c2, int c3,
                         int c4, uint32_t bar) {
  emu::TensorMap t;
  std::memcpy(&t, map, sizeof t);
  S4KV_CHECK(t.rank == 5, "emulation: bulk_copy_5d with a map of rank ", t.rank);
  S4KV_CHECK(dst % 512 == 0, "emulation: bulk copy into shared address ", dst,
             ", not 512-byte aligned (the 64-byte swizzle)");
  const int c[5] = {c0, c1, c2, c3, c4};
  for (int d = 0; d < 5; ++d) {
    S4KV_CHECK(c[d] >= 0 && static_cast<uint64_t>(c[d]) + t.box[d] <= t.dims[d],
               "emulation: bulk copy box past the tensor in dimension ", d);
  }
  S4KV_CHECK(c0 == 0 && t.box[0] == t.dims[0], "emulation: partial rows");
  emu::BulkCopy copy{emu::shared_at(dst), dst, {}};
  size_t bytes = 0;
  for (uint32_t i4 = 0; i4 < t.box[4]; ++i4) {
    for (uint32_t i3 = 0; i3 < t.box[3]; ++i3) {
      for (uint32_t i2 = 0; i2 < t.box[2]; ++i2) {
        for (uint32_t i1 = 0; i1 < t.box[1]; ++i1) {
          const uint64_t off = (c1 + i1) * t.strides[0] + (c2 + i2) * t.strides[1] +
                               (c3 + i3) * t.strides[2] + (c4 + i4) * t.strides[3];
          copy.rows.emplace_back(t.base + off, t.box[0]);
          bytes += t.box[0];
        }
      }
    }
  }
  (void)emu::shared_at(static_cast<uint32_t>(dst + bytes - 1));  // within the block's memory
  emu_detail::mbarrier_add_copy(bar, std::move(copy));
}
inline void bulk_copy_1d(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  S4KV_CHECK(dst % 16 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0 && bytes % 16 == 0,
             "emulation: bulk copy of ", bytes, " bytes to shared address ", dst,
             ", not 16-byte aligned");
  (void)emu::shared_at(dst + bytes - 1);  // within the block's memory
  emu_detail::mbarrier_add_copy(
      bar, {emu::shared_at(dst), dst, {{static_cast<const unsigned char*>(src), bytes}}, false});
}

}  // namespace s4kv::backend::cuda
