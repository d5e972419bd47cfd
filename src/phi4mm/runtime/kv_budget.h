// The byte budget the batched engine's KV caches come from. A request reserves what its cache
// holds now (its prompt and a block) when it is admitted, and one block more each time its cache
// grows; a reservation is returned the moment its request ends, is cancelled, expires or is
// preempted. Thread-safe: the engine thread reserves and releases, metrics read.
#pragma once

#include <cstdint>
#include <mutex>

namespace phi4mm {

class KvBudget {
 public:
  explicit KvBudget(int64_t limit_bytes) : limit_(limit_bytes) {}
  int64_t limit() const { return limit_; }
  int64_t reserved() const;
  // Reserves `bytes` if they fit next to what is reserved now.
  bool TryReserve(int64_t bytes);
  void Release(int64_t bytes);

 private:
  const int64_t limit_;
  mutable std::mutex mu_;
  int64_t reserved_ = 0;
};

// A reservation that gives its bytes back when it is destroyed or reset (move-only).
class KvReservation {
 public:
  KvReservation() = default;
  KvReservation(KvBudget* budget, int64_t bytes) : budget_(budget), bytes_(bytes) {}
  KvReservation(KvReservation&& o) noexcept : budget_(o.budget_), bytes_(o.bytes_) { o.budget_ = nullptr; }
  KvReservation& operator=(KvReservation&& o) noexcept;
  KvReservation(const KvReservation&) = delete;
  KvReservation& operator=(const KvReservation&) = delete;
  ~KvReservation() { Reset(); }
  void Reset();
  // Adds `more` bytes if they fit the budget now.
  bool TryGrow(int64_t more) {
    if (budget_ == nullptr || !budget_->TryReserve(more)) return false;
    bytes_ += more;
    return true;
  }
  int64_t bytes() const { return budget_ ? bytes_ : 0; }

 private:
  KvBudget* budget_ = nullptr;
  int64_t bytes_ = 0;
};

}  // namespace phi4mm
