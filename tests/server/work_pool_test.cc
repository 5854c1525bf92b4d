// WorkPool: tasks run off the caller's thread; a full queue refuses at once instead of
// queueing (the caller answers 503); drain() waits for queued and running tasks and refuses
// new ones. Workers are held on a latch, never timed.
#include "server/work_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace s4kv::server {
namespace {

// Tasks block on it until it opens.
class Latch {
 public:
  void wait() {
    std::unique_lock<std::mutex> lock(mu_);
    ++waiting_;
    changed_.notify_all();
    changed_.wait(lock, [this] { return open_; });
  }
  void open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    changed_.notify_all();
  }
  // Blocks until n tasks are waiting on the latch.
  void wait_for_waiters(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    changed_.wait(lock, [&] { return waiting_ >= n; });
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  int waiting_ = 0;
  bool open_ = false;
};

TEST(WorkPoolTest, RunsTasksOffTheCallersThread) {
  WorkPool pool(2, 8);
  std::atomic<int> ran{0};
  std::atomic<bool> on_caller{false};
  const std::thread::id caller = std::this_thread::get_id();
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(pool.try_post([&] {
      if (std::this_thread::get_id() == caller) on_caller = true;
      ++ran;
    }));
  }
  pool.drain();
  EXPECT_EQ(ran.load(), 8);
  EXPECT_FALSE(on_caller.load());
}

TEST(WorkPoolTest, FullQueueRefusesAtOnce) {
  WorkPool pool(2, 3);
  Latch latch;
  std::atomic<int> ran{0};
  auto task = [&] {
    latch.wait();
    ++ran;
  };
  ASSERT_TRUE(pool.try_post(task));
  ASSERT_TRUE(pool.try_post(task));
  latch.wait_for_waiters(2);  // both workers busy
  EXPECT_EQ(pool.num_busy(), 2u);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(pool.try_post(task)) << i;
  EXPECT_EQ(pool.num_queued(), 3u);
  EXPECT_FALSE(pool.try_post(task));  // queue full: refused, not queued
  EXPECT_EQ(pool.num_queued(), 3u);
  latch.open();
  pool.drain();
  EXPECT_EQ(ran.load(), 5);
}

TEST(WorkPoolTest, DrainWaitsForRunningTasksAndRefusesNewOnes) {
  WorkPool pool(1, 4);
  Latch latch;
  std::atomic<bool> finished{false};
  ASSERT_TRUE(pool.try_post([&] {
    latch.wait();
    finished = true;
  }));
  latch.wait_for_waiters(1);
  std::thread opener([&] { latch.open(); });
  pool.drain();
  EXPECT_TRUE(finished.load());
  opener.join();
  EXPECT_FALSE(pool.try_post([] {}));
}

TEST(WorkPoolTest, ThrowingTaskDoesNotStopTheWorker) {
  WorkPool pool(1, 4);
  std::atomic<bool> second{false};
  ASSERT_TRUE(pool.try_post([] { throw std::runtime_error("bug"); }));
  ASSERT_TRUE(pool.try_post([&] { second = true; }));
  pool.drain();
  EXPECT_TRUE(second.load());
}

}  // namespace
}  // namespace s4kv::server
