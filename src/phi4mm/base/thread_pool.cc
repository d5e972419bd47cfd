// ThreadPool implementation: the caller publishes a job and bumps an atomic generation counter;
// workers spin on the counter (then sleep on cv_work_), run their fixed chunk, and count down
// pending_, which the caller spins on (then sleeps on cv_done_). Every worker acknowledges every
// job, even one it has no chunk of, so the job fields are never rewritten while a worker reads them.
#include "phi4mm/base/thread_pool.h"

#include <algorithm>

namespace phi4mm {

namespace {

thread_local bool t_inside_pool = false;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

// Spins until done() or kSpin has passed; returns done(). After the first few hundred pauses it
// yields the core on every try, so an oversubscribed machine (more runnable threads than cores)
// runs the thread being waited for instead of the spinner.
template <class Done>
bool SpinUntil(Done done) {
  const auto deadline = std::chrono::steady_clock::now() + ThreadPool::kSpin;
  for (int i = 0;; ++i) {
    if (done()) return true;
    if (i < 256) {
      CpuRelax();
    } else {
      std::this_thread::yield();
      if (std::chrono::steady_clock::now() > deadline) return done();
    }
  }
}

void ChunkRange(int64_t n, int chunks, int index, int64_t* b, int64_t* e) {
  const int64_t base = n / chunks, rem = n % chunks;
  *b = index * base + std::min<int64_t>(index, rem);
  *e = *b + base + (index < rem ? 1 : 0);
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = std::max(1u, std::thread::hardware_concurrency());
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  {
    std::lock_guard<std::mutex> lock(mu_);
  }
  cv_work_.notify_all();
  for (auto& t : workers_) t.join();
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
  fn_ = &fn;
  n_ = n;
  chunks_ = chunks;
  pending_.store(static_cast<int>(workers_.size()));
  generation_.fetch_add(1);  // seq_cst: ordered before the sleeping_workers_ check below
  if (sleeping_workers_.load() > 0) {
    { std::lock_guard<std::mutex> lock(mu_); }
    cv_work_.notify_all();
  }
  t_inside_pool = true;
  int64_t b, e;
  ChunkRange(n, chunks, 0, &b, &e);
  fn(b, e);
  t_inside_pool = false;
  auto done = [this] { return pending_.load(std::memory_order_acquire) == 0; };
  if (!SpinUntil(done)) {
    caller_sleeping_.store(true);
    std::unique_lock<std::mutex> lock(mu_);
    cv_done_.wait(lock, done);
    caller_sleeping_.store(false);
  }
  fn_ = nullptr;
}

void ThreadPool::WorkerLoop(int index) {
  t_inside_pool = true;
  uint64_t seen = 0;
  for (;;) {
    auto ready = [&] { return stop_.load(std::memory_order_relaxed) || generation_.load(std::memory_order_acquire) != seen; };
    if (!SpinUntil(ready)) {
      sleeping_workers_.fetch_add(1);  // seq_cst: a caller bumping generation_ after this sees it
      std::unique_lock<std::mutex> lock(mu_);
      cv_work_.wait(lock, ready);
      sleeping_workers_.fetch_sub(1);
    }
    if (stop_.load()) return;
    seen = generation_.load(std::memory_order_acquire);
    if (index < chunks_) {
      int64_t b, e;
      ChunkRange(n_, chunks_, index, &b, &e);
      (*fn_)(b, e);
    }
    if (pending_.fetch_sub(1) == 1 && caller_sleeping_.load()) {
      { std::lock_guard<std::mutex> lock(mu_); }
      cv_done_.notify_one();
    }
  }
}

}  // namespace phi4mm
