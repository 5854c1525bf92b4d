// WorkPool: workers take tasks from a bounded FIFO (see work_pool.h).
// Invariants (under mu_): queue_.size() <= max_queued_; busy_ counts tasks taken and not yet
// finished; once closed_, nothing is queued; stop_ is set only in the destructor.
#include "server/work_pool.h"

#include <exception>
#include <string>
#include <utility>

#include "common/check.h"
#include "common/log.h"

namespace s4kv::server {

WorkPool::WorkPool(int num_threads, size_t max_queued) : max_queued_(max_queued) {
  S4KV_CHECK(num_threads >= 1, "WorkPool needs at least one thread, got ", num_threads);
  threads_.reserve(static_cast<size_t>(num_threads));
  for (int i = 0; i < num_threads; ++i) threads_.emplace_back([this] { work(); });
}

WorkPool::~WorkPool() {
  drain();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : threads_) t.join();
}

bool WorkPool::try_post(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_ || queue_.size() >= max_queued_) return false;
    queue_.push_back(std::move(task));
  }
  wake_.notify_one();
  return true;
}

void WorkPool::drain() {
  std::unique_lock<std::mutex> lock(mu_);
  closed_ = true;
  idle_.wait(lock, [this] { return queue_.empty() && busy_ == 0; });
}

size_t WorkPool::num_queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

size_t WorkPool::num_busy() const {
  std::lock_guard<std::mutex> lock(mu_);
  return busy_;
}

void WorkPool::work() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    wake_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ and nothing left
    std::function<void()> task = std::move(queue_.front());
    queue_.pop_front();
    ++busy_;
    lock.unlock();
    try {
      task();
    } catch (const std::exception& e) {
      log_error("server", std::string("work pool task threw: ") + e.what());
    } catch (...) {
      log_error("server", "work pool task threw a non-standard exception");
    }
    task = nullptr;  // release what it holds before counting it done
    lock.lock();
    --busy_;
    if (queue_.empty() && busy_ == 0) idle_.notify_all();
  }
}

}  // namespace s4kv::server
