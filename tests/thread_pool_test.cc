// ThreadPool hand-off: many back-to-back jobs (the spinning path), jobs after the workers have gone
// to sleep (the condition-variable path), jobs with fewer chunks than threads, nested and
// concurrent callers, and destruction of an idle or sleeping pool. Checks results only, never time.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "phi4mm/base/thread_pool.h"

namespace phi4mm {
namespace {

// Runs one job over [0, n) and checks every index was visited exactly once.
void CheckCovers(ThreadPool& pool, int64_t n, int64_t grain = 1) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  pool.ParallelFor(n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
  }, grain);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "n=" << n << " i=" << i;
}

TEST(ThreadPoolHandoff, BackToBackJobsOfEverySize) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int rep = 0; rep < 2000; ++rep) CheckCovers(pool, rep % 9, 1 + rep % 3);
  }
}

TEST(ThreadPoolHandoff, WakesSleepingWorkers) {
  ThreadPool pool(3);
  for (int rep = 0; rep < 4; ++rep) {
    std::this_thread::sleep_for(ThreadPool::kSpin * 3);
    CheckCovers(pool, 1000);
  }
}

TEST(ThreadPoolHandoff, CallerSleepsWhileWorkersRunLongChunks) {
  ThreadPool pool(2);
  std::atomic<int> sum{0};
  pool.ParallelFor(2, [&](int64_t b, int64_t e) {
    if (b == 1) std::this_thread::sleep_for(ThreadPool::kSpin * 3);
    sum += static_cast<int>(e - b);
  });
  EXPECT_EQ(sum.load(), 2);
}

TEST(ThreadPoolHandoff, NestedAndConcurrentCallers) {
  ThreadPool pool(3);
  std::atomic<int64_t> total{0};
  auto caller = [&] {
    for (int rep = 0; rep < 300; ++rep)
      pool.ParallelFor(6, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i)
          pool.ParallelFor(4, [&](int64_t b2, int64_t e2) { total += e2 - b2; });  // runs inline
      });
  };
  std::thread other(caller);
  caller();
  other.join();
  EXPECT_EQ(total.load(), 2 * 300 * 6 * 4);
}

TEST(ThreadPoolHandoff, DestroysIdleAndSleepingPools) {
  { ThreadPool pool(4); }
  {
    ThreadPool pool(4);
    CheckCovers(pool, 10);
  }
  {
    ThreadPool pool(4);
    CheckCovers(pool, 10);
    std::this_thread::sleep_for(ThreadPool::kSpin * 3);
  }
}

}  // namespace
}  // namespace phi4mm
