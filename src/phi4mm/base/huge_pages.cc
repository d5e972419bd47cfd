// MapHugeAligned, AdviseHugePages and AllocateHugeAligned (POSIX mmap; the advice only where
// MADV_HUGEPAGE exists).
#include "phi4mm/base/huge_pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>

namespace phi4mm {

void* MapHugeAligned(size_t size, int fd) {
  if (size < kHugePageBytes) return nullptr;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  // Reserve one huge page more than needed, place the mapping at the first 2 MiB boundary inside
  // the reservation, then give back the slack on both sides.
  void* reserved =
      ::mmap(nullptr, size + kHugePageBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (reserved == MAP_FAILED) return nullptr;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(reserved), end = begin + size + kHugePageBytes;
  const uintptr_t at = (begin + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  void* p = fd >= 0 ? ::mmap(reinterpret_cast<void*>(at), size, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0)
                    : ::mmap(reinterpret_cast<void*>(at), size, PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  if (p == MAP_FAILED) {
    ::munmap(reserved, size + kHugePageBytes);
    return nullptr;
  }
  const uintptr_t tail = (at + size + page - 1) / page * page;
  if (at > begin) ::munmap(reserved, at - begin);
  if (end > tail) ::munmap(reinterpret_cast<void*>(tail), end - tail);
  return p;
}

void AdviseHugePages(void* p, size_t size) {
#ifdef MADV_HUGEPAGE
  if (p != nullptr && size > 0) ::madvise(p, size, MADV_HUGEPAGE);
#else
  (void)p;
  (void)size;
#endif
}

std::shared_ptr<uint8_t[]> AllocateHugeAligned(size_t bytes) {
  const size_t len = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  if (void* p = bytes >= kHugePageBytes ? MapHugeAligned(len, -1) : nullptr) {
    AdviseHugePages(p, len);
    return std::shared_ptr<uint8_t[]>(static_cast<uint8_t*>(p), [len](uint8_t* q) { ::munmap(q, len); });
  }
  return std::shared_ptr<uint8_t[]>(new uint8_t[bytes == 0 ? 1 : bytes]());
}

}  // namespace phi4mm
