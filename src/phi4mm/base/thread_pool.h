// One persistent pool of worker threads shared by all models of a process. ParallelFor splits a
// range into one contiguous chunk per thread (the caller's thread takes chunk 0) and returns when
// all chunks are done. Calls from different threads are serialised; a nested call runs inline.
// Decode calls ParallelFor a few hundred times per token, so hand-off and completion spin for a
// short while (kSpin) before falling back to sleeping on a condition variable: back-to-back calls
// cost well under a microsecond of latency, and an idle pool sleeps instead of burning its cores.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace phi4mm {

class ThreadPool {
 public:
  // How long a worker (or the caller) spins waiting for work (or for the workers) before sleeping.
  static constexpr std::chrono::microseconds kSpin{1000};

  // num_threads <= 0 means one per hardware core.
  explicit ThreadPool(int num_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }
  // fn(begin, end) over [0, n), split into at most num_threads() chunks of at least `grain` items.
  void ParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain = 1);

 private:
  void WorkerLoop(int index);

  std::vector<std::thread> workers_;
  std::mutex run_mu_;  // one ParallelFor at a time
  // The current job: written by the caller before it bumps generation_, read by the workers after
  // they see the new generation; unchanged until every worker has acknowledged it (pending_ == 0).
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  int chunks_ = 0;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};  // workers that have not finished (or skipped) the current job
  std::atomic<bool> stop_{false};
  // Sleeping side of the hand-off: a waker takes mu_ and notifies only when someone may be asleep.
  std::mutex mu_;
  std::condition_variable cv_work_, cv_done_;
  std::atomic<int> sleeping_workers_{0};
  std::atomic<bool> caller_sleeping_{false};
};

}  // namespace phi4mm
