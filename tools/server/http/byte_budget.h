// A byte budget with a first-come-first-served queue of waiters, for memory a server holds on
// behalf of requests before the engine admits them: request bodies being received (the HTTP
// layer) and decoded media waiting to be encoded (the OpenAI layer). A take that does not fit
// waits, in arrival order, until enough is given back; a take larger than the whole budget is
// refused at once. Callbacks of granted waiters run on the thread that gave the bytes back, after
// the budget's lock is released. Thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

namespace phi4mm::server::http {

class ByteBudget {
 public:
  explicit ByteBudget(int64_t limit) : limit_(limit) {}
  ByteBudget(const ByteBudget&) = delete;
  ByteBudget& operator=(const ByteBudget&) = delete;

  enum class Outcome { kTaken, kQueued, kTooLarge };
  using Ticket = uint64_t;
  // Takes `bytes` when they fit now and nobody waits ahead (kTaken; `granted` is not called);
  // otherwise queues `granted`, which runs once the bytes have been taken for it (kQueued, with
  // the wait's ticket in *ticket). kTooLarge when `bytes` exceed the whole limit.
  Outcome Take(int64_t bytes, std::function<void()> granted, Ticket* ticket = nullptr);
  // Takes `bytes` only if they fit now and nobody waits (never queues).
  bool TryTake(int64_t bytes);
  // Withdraws a queued take; true when it was still waiting (its callback will never run).
  bool Cancel(Ticket ticket);
  void Give(int64_t bytes);

  int64_t limit() const { return limit_; }
  int64_t used() const;
  int64_t waiting() const;  // queued takes
  int64_t peak() const;     // the most ever taken at once

 private:
  struct Waiter {
    Ticket ticket;
    int64_t bytes;
    std::function<void()> granted;
  };
  // Takes bytes for the waiters at the head that now fit (mu_ held); their callbacks, to run after
  // the lock is released.
  std::vector<std::function<void()>> GrantLocked();

  const int64_t limit_;
  mutable std::mutex mu_;
  int64_t used_ = 0, peak_ = 0;
  Ticket next_ = 1;
  std::deque<Waiter> waiters_;
};

// Bytes taken from a budget, given back when the hold is destroyed or reset (move-only).
class BudgetHold {
 public:
  BudgetHold() = default;
  BudgetHold(ByteBudget* budget, int64_t bytes) : budget_(budget), bytes_(bytes) {}
  BudgetHold(BudgetHold&& o) noexcept : budget_(o.budget_), bytes_(o.bytes_) { o.budget_ = nullptr; }
  BudgetHold& operator=(BudgetHold&& o) noexcept {
    if (this != &o) {
      Reset();
      budget_ = o.budget_;
      bytes_ = o.bytes_;
      o.budget_ = nullptr;
    }
    return *this;
  }
  BudgetHold(const BudgetHold&) = delete;
  BudgetHold& operator=(const BudgetHold&) = delete;
  ~BudgetHold() { Reset(); }
  void Reset() {
    if (budget_ != nullptr) budget_->Give(bytes_);
    budget_ = nullptr;
    bytes_ = 0;
  }
  // Adds `more` bytes already taken from the same budget.
  void Add(int64_t more) { bytes_ += more; }
  // Gives back what is held beyond `bytes`.
  void ShrinkTo(int64_t bytes) {
    if (budget_ == nullptr || bytes >= bytes_) return;
    budget_->Give(bytes_ - bytes);
    bytes_ = bytes;
  }
  int64_t bytes() const { return budget_ ? bytes_ : 0; }

 private:
  ByteBudget* budget_ = nullptr;
  int64_t bytes_ = 0;
};

}  // namespace phi4mm::server::http
