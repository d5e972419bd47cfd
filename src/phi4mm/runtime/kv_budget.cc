// KvBudget and KvReservation.
#include "phi4mm/runtime/kv_budget.h"

namespace phi4mm {

int64_t KvBudget::reserved() const {
  std::lock_guard<std::mutex> l(mu_);
  return reserved_;
}

bool KvBudget::TryReserve(int64_t bytes) {
  std::lock_guard<std::mutex> l(mu_);
  if (bytes < 0 || bytes > limit_ - reserved_) return false;
  reserved_ += bytes;
  return true;
}

void KvBudget::Release(int64_t bytes) {
  std::lock_guard<std::mutex> l(mu_);
  reserved_ -= bytes;
}

KvReservation& KvReservation::operator=(KvReservation&& o) noexcept {
  if (this != &o) {
    Reset();
    budget_ = o.budget_;
    bytes_ = o.bytes_;
    o.budget_ = nullptr;
  }
  return *this;
}

void KvReservation::Reset() {
  if (budget_ != nullptr) budget_->Release(bytes_);
  budget_ = nullptr;
  bytes_ = 0;
}

}  // namespace phi4mm
