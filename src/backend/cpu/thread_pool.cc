#include "backend/cpu/thread_pool.h"

#include <immintrin.h>
#include <sched.h>

#include <algorithm>

namespace s4kv::backend::cpu {

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

// Run i takes rows [i * num_rows / num_runs, (i + 1) * num_rows / num_runs): the runs cover
// every row once and differ in length by one row at most.
void parallel_for_rows(ThreadPool* pool, int64_t num_rows, int64_t values_per_row,
                       const std::function<void(int64_t, int64_t)>& part) {
  if (num_rows <= 0) return;
  const int64_t threads = pool != nullptr ? pool->num_threads() : 1;
  const int64_t values = num_rows * std::max<int64_t>(values_per_row, 1);
  const int64_t num_runs =
      std::clamp<int64_t>(values / kMinRunValues, 1, std::min(num_rows, kRunsPerThread * threads));
  if (threads == 1 || num_runs == 1) {
    part(0, num_rows);
    return;
  }
  pool->parallel_for(
      num_runs, [&](int64_t i) { part(i * num_rows / num_runs, (i + 1) * num_rows / num_runs); });
}

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = available_cores();
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

template <typename Pred>
bool ThreadPool::spin_until(const Pred& pred) {
  const auto deadline = std::chrono::steady_clock::now() + kSpin;
  for (int i = 0;; ++i) {
    if (pred()) return true;
    _mm_pause();
    if ((i & 63) == 63 && std::chrono::steady_clock::now() > deadline) return pred();
  }
}

// Items are handed out one at a time under the mutex: work items are coarse (a head and a
// chunk of queries), so the lock is not contended enough to matter.
void ThreadPool::run_items() {
  std::unique_lock<std::mutex> lock(mu_);
  while (fn_ != nullptr && next_ < n_) {
    const int64_t i = next_++;
    const auto* fn = fn_;
    lock.unlock();
    (*fn)(i);
    lock.lock();
    if (pending_.fetch_sub(1) == 1) {
      fn_ = nullptr;
      done_cv_.notify_all();
    }
  }
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    const auto called = [&] { return stop_.load() || generation_.load() != seen; };
    if (!spin_until(called)) {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, called);
    }
    if (stop_.load()) return;
    seen = generation_.load();
    run_items();
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t)>& fn) {
  if (n <= 0) return;
  if (workers_.empty() || n == 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    n_ = n;
    next_ = 0;
    pending_ = n;
    ++generation_;
  }
  start_cv_.notify_all();
  run_items();
  const auto done = [&] { return pending_.load() == 0; };
  if (spin_until(done)) return;
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, done);
}

}  // namespace s4kv::backend::cpu
