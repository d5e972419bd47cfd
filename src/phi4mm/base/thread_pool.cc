// ThreadPool implementation: a generation counter wakes the workers, each takes its fixed chunk.
#include "phi4mm/base/thread_pool.h"

#include <algorithm>

namespace phi4mm {

namespace {
thread_local bool t_inside_pool = false;
}

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = std::max(1u, std::thread::hardware_concurrency());
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_work_.notify_all();
  for (auto& t : workers_) t.join();
}

static void ChunkRange(int64_t n, int chunks, int index, int64_t* b, int64_t* e) {
  const int64_t base = n / chunks, rem = n % chunks;
  *b = index * base + std::min<int64_t>(index, rem);
  *e = *b + base + (index < rem ? 1 : 0);
}

void ThreadPool::ParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain) {
  if (n <= 0) return;
  const int64_t max_chunks = std::max<int64_t>(1, n / std::max<int64_t>(1, grain));
  const int chunks = static_cast<int>(std::min<int64_t>(num_threads(), max_chunks));
  if (chunks <= 1 || t_inside_pool) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> run_lock(run_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    n_ = n;
    chunks_ = chunks;
    pending_ = chunks - 1;
    ++generation_;
  }
  cv_work_.notify_all();
  t_inside_pool = true;
  int64_t b, e;
  ChunkRange(n, chunks, 0, &b, &e);
  fn(b, e);
  t_inside_pool = false;
  std::unique_lock<std::mutex> lock(mu_);
  cv_done_.wait(lock, [this] { return pending_ == 0; });
  fn_ = nullptr;
}

void ThreadPool::WorkerLoop(int index) {
  t_inside_pool = true;
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int64_t, int64_t)>* fn;
    int64_t n;
    int chunks;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_work_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      fn = fn_;
      n = n_;
      chunks = chunks_;
    }
    if (index < chunks) {
      int64_t b, e;
      ChunkRange(n, chunks, index, &b, &e);
      (*fn)(b, e);
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) cv_done_.notify_one();
    }
  }
}

}  // namespace phi4mm
