// A fixed pool of worker threads for the CPU backend's loops: attention over heads and query
// chunks, and GEMMs in column slices (linear.h; OpenBLAS then runs no threads of its own). One
// parallel_for at a time; the caller blocks until every index has run and takes part in the
// work itself.
// Owned by one CpuBackend (engine thread only). parallel_for_rows splits row-wise ops (RoPE,
// SwiGLU) into contiguous runs of rows over a pool.
//
// A step makes ~30 parallel_for calls a few hundred microseconds apart; waking a thread blocked
// on a condition variable takes tens of microseconds each time. So a worker that has finished
// polls for the next call for up to kSpin before it blocks, and so does the caller waiting for
// the last index (the state itself changes only under the mutex; the polls read atomics).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace s4kv::backend::cpu {

// The cores this process may run on (its CPU affinity: taskset, cgroup cpusets), at least 1.
int available_cores();

class ThreadPool;

// Calls part(begin, end) on contiguous runs of rows that cover [0, num_rows) exactly once,
// spread over pool's threads (nullptr: all on the caller). A run holds kMinRunValues values at
// least (values_per_row each), so a decode step's few rows stay on the caller, and each thread
// gets kRunsPerThread runs at most. part must be safe to run concurrently on distinct rows.
inline constexpr int64_t kMinRunValues = 16 * 1024;
inline constexpr int64_t kRunsPerThread = 4;
void parallel_for_rows(ThreadPool* pool, int64_t num_rows, int64_t values_per_row,
                       const std::function<void(int64_t, int64_t)>& part);

class ThreadPool {
 public:
  // num_threads counts the caller: 1 runs everything inline; 0 means available_cores().
  explicit ThreadPool(int num_threads = 0);
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  ~ThreadPool();

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(i) for every i in [0, n), spread over the threads in dynamic order; returns when
  // all calls have finished. fn must be safe to run concurrently for distinct i.
  void parallel_for(int64_t n, const std::function<void(int64_t)>& fn);

 private:
  void worker_loop();
  void run_items();
  // Polls until pred() holds or kSpin has passed; returns pred().
  template <typename Pred>
  static bool spin_until(const Pred& pred);

  static constexpr std::chrono::microseconds kSpin{100};

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_cv_;
  std::condition_variable done_cv_;
  const std::function<void(int64_t)>* fn_ = nullptr;  // guarded by mu_
  int64_t n_ = 0;
  int64_t next_ = 0;                      // next index to hand out; guarded by mu_
  std::atomic<int64_t> pending_ = 0;      // indices not yet finished; written under mu_
  std::atomic<uint64_t> generation_ = 0;  // written under mu_
  std::atomic<bool> stop_ = false;        // written under mu_
};

}  // namespace s4kv::backend::cpu
