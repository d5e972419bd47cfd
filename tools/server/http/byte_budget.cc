// ByteBudget: the waiters are served strictly in arrival order, so a large take is not starved by
// a stream of small ones.
#include "byte_budget.h"

#include <algorithm>
#include <vector>

namespace phi4mm::server::http {

ByteBudget::Outcome ByteBudget::Take(int64_t bytes, std::function<void()> granted, Ticket* ticket) {
  std::lock_guard<std::mutex> l(mu_);
  if (bytes < 0 || bytes > limit_) return Outcome::kTooLarge;
  if (waiters_.empty() && bytes <= limit_ - used_) {
    used_ += bytes;
    peak_ = std::max(peak_, used_);
    return Outcome::kTaken;
  }
  const Ticket t = next_++;
  waiters_.push_back({t, bytes, std::move(granted)});
  if (ticket != nullptr) *ticket = t;
  return Outcome::kQueued;
}

bool ByteBudget::TryTake(int64_t bytes) {
  std::lock_guard<std::mutex> l(mu_);
  if (bytes < 0 || !waiters_.empty() || bytes > limit_ - used_) return false;
  used_ += bytes;
  peak_ = std::max(peak_, used_);
  return true;
}

bool ByteBudget::Cancel(Ticket ticket) {
  std::vector<std::function<void()>> run;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = std::find_if(waiters_.begin(), waiters_.end(), [&](const Waiter& w) { return w.ticket == ticket; });
    if (it == waiters_.end()) return false;
    waiters_.erase(it);
    // The withdrawn waiter may have been the one blocking those behind it.
    run = GrantLocked();
  }
  for (auto& f : run) f();
  return true;
}

void ByteBudget::Give(int64_t bytes) {
  std::vector<std::function<void()>> run;
  {
    std::lock_guard<std::mutex> l(mu_);
    used_ -= bytes;
    run = GrantLocked();
  }
  for (auto& f : run) f();
}

std::vector<std::function<void()>> ByteBudget::GrantLocked() {
  std::vector<std::function<void()>> run;
  while (!waiters_.empty() && waiters_.front().bytes <= limit_ - used_) {
    used_ += waiters_.front().bytes;
    peak_ = std::max(peak_, used_);
    run.push_back(std::move(waiters_.front().granted));
    waiters_.pop_front();
  }
  return run;
}

int64_t ByteBudget::used() const {
  std::lock_guard<std::mutex> l(mu_);
  return used_;
}

int64_t ByteBudget::waiting() const {
  std::lock_guard<std::mutex> l(mu_);
  return static_cast<int64_t>(waiters_.size());
}

int64_t ByteBudget::peak() const {
  std::lock_guard<std::mutex> l(mu_);
  return peak_;
}

}  // namespace phi4mm::server::http
