// WorkPool: a fixed set of worker threads and a bounded queue of tasks, for the CPU work of a
// request before it reaches the engine (JSON parsing, checks, chat template rendering,
// tokenization), so that this work runs neither on the HTTP I/O threads (which must keep
// answering /health, /metrics and streaming) nor on the engine thread. try_post refuses at
// once when the queue is full, so the caller answers 503 instead of queueing without bound.
//
// Threads: try_post, num_queued, num_busy and drain from any thread (not from a task);
// tasks run on the workers, each task once. A task that throws is a bug: it is logged and
// the worker goes on.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace s4kv::server {

class WorkPool {
 public:
  // num_threads >= 1 workers; at most max_queued tasks waiting for one (running ones aside).
  WorkPool(int num_threads, size_t max_queued);
  ~WorkPool();  // drain(), then joins the workers
  WorkPool(const WorkPool&) = delete;
  WorkPool& operator=(const WorkPool&) = delete;

  // Queues task; false (task dropped) when max_queued tasks already wait or after drain().
  [[nodiscard]] bool try_post(std::function<void()> task);
  // Refuses further tasks and blocks until every queued and running task has finished.
  void drain();

  size_t num_queued() const;
  size_t num_busy() const;  // tasks running now

 private:
  void work();

  const size_t max_queued_;
  mutable std::mutex mu_;
  std::condition_variable wake_;  // a task was queued, or stopping
  std::condition_variable idle_;  // a task finished
  std::deque<std::function<void()>> queue_;
  size_t busy_ = 0;
  bool closed_ = false;  // drain() began: no more tasks
  bool stop_ = false;    // workers exit once the queue is empty
  std::vector<std::thread> threads_;
};

}  // namespace s4kv::server
