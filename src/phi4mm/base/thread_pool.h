// One persistent pool of worker threads shared by all models of a process. ParallelFor splits a
// range into one contiguous chunk per thread (the caller's thread takes chunk 0) and returns when
// all chunks are done. Calls from different threads are serialised; a nested call runs inline.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace phi4mm {

class ThreadPool {
 public:
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
  std::mutex mu_;
  std::condition_variable cv_work_, cv_done_;
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  int chunks_ = 0;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

}  // namespace phi4mm
