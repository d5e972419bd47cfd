// BodyBytes: mmap for the first bytes, mremap (the kernel moves page tables, not bytes) to grow.
#include "body_bytes.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>

namespace phi4mm::server::http {

namespace {
constexpr size_t kPage = 4096;
size_t RoundUp(size_t n) { return (n + kPage - 1) / kPage * kPage; }
}  // namespace

BodyBytes::~BodyBytes() { Clear(); }

BodyBytes::BodyBytes(BodyBytes&& o) noexcept : data_(o.data_), size_(o.size_), capacity_(o.capacity_) {
  o.data_ = nullptr;
  o.size_ = o.capacity_ = 0;
}

BodyBytes& BodyBytes::operator=(BodyBytes&& o) noexcept {
  if (this != &o) {
    Clear();
    data_ = o.data_;
    size_ = o.size_;
    capacity_ = o.capacity_;
    o.data_ = nullptr;
    o.size_ = o.capacity_ = 0;
  }
  return *this;
}

bool BodyBytes::Reserve(size_t n) {
  if (n <= capacity_) return true;
  const size_t cap = RoundUp(n);
  void* p = data_ == nullptr ? mmap(nullptr, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                             : mremap(data_, capacity_, cap, MREMAP_MAYMOVE);
  if (p == MAP_FAILED) return false;
  data_ = static_cast<char*>(p);
  capacity_ = cap;
  return true;
}

bool BodyBytes::Append(const char* p, size_t n) {
  if (n == 0) return true;
  if (size_ + n > capacity_ && !Reserve(std::max(size_ + n, capacity_ * 2))) return false;
  std::memcpy(data_ + size_, p, n);
  size_ += n;
  return true;
}

void BodyBytes::Clear() {
  if (data_ != nullptr) munmap(data_, capacity_);
  data_ = nullptr;
  size_ = capacity_ = 0;
}

}  // namespace phi4mm::server::http
