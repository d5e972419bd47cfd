// KvSwap and SwappedKv (kv_swap.h): pwrite/pread of the cache's runs, in KvCache::ForEachRun order.
#include "phi4mm/runtime/kv_swap.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <new>
#include <utility>

namespace phi4mm {

namespace {

std::string TempDir(const std::string& dir) {
  if (!dir.empty()) return dir;
  std::error_code ec;
  const std::filesystem::path p = std::filesystem::temp_directory_path(ec);
  return ec ? "/tmp" : p.string();
}

// An unnamed file in `dir`: O_TMPFILE where the file system has it, else a named one unlinked at once.
int OpenUnnamed(const std::string& dir) {
#ifdef O_TMPFILE
  int fd = open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0) return fd;
#endif
  std::string path = dir + "/phi4mm-kv-XXXXXX";
  int tmp = mkstemp(path.data());
  if (tmp >= 0) unlink(path.c_str());
  return tmp;
}

// All `n` bytes at *off through `io` (pread or pwrite), retrying short transfers and EINTR.
template <class Buf, class Io>
bool Transfer(Io io, int fd, Buf* p, size_t n, off_t* off) {
  while (n > 0) {
    const ssize_t k = io(fd, p, n, *off);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
    *off += k;
  }
  return true;
}

}  // namespace

SwappedKv::SwappedKv(SwappedKv&& o) noexcept
    : owner_(std::exchange(o.owner_, nullptr)),
      fd_(std::exchange(o.fd_, -1)),
      length_(o.length_),
      bytes_(o.bytes_),
      long_rope_(o.long_rope_) {}

SwappedKv& SwappedKv::operator=(SwappedKv&& o) noexcept {
  if (this != &o) {
    this->~SwappedKv();
    new (this) SwappedKv(std::move(o));
  }
  return *this;
}

SwappedKv::~SwappedKv() {
  if (fd_ >= 0) close(fd_);
  if (owner_ != nullptr) owner_->used_ -= bytes_;
  fd_ = -1;
  owner_ = nullptr;
}

Result<SwappedKv> KvSwap::Out(const KvCache& cache) {
  int64_t bytes = 0;
  cache.ForEachRun([&](const uint8_t*, size_t n) { bytes += static_cast<int64_t>(n); });
  if (bytes > limit_ - used_)
    return ResourceExhausted("the KV swap space is full (" + std::to_string(used_ >> 20) + " of " +
                             std::to_string(limit_ >> 20) + " MiB in use)");
  const std::string dir = TempDir(dir_);
  const int fd = OpenUnnamed(dir);
  if (fd < 0) return Internal("cannot make a KV swap file in " + dir + ": " + std::strerror(errno));
  off_t off = 0;
  bool ok = true;
  cache.ForEachRun([&](const uint8_t* p, size_t n) { ok = ok && Transfer(pwrite, fd, p, n, &off); });
  if (!ok) {
    const int err = errno;
    close(fd);
    return Internal("cannot write the KV swap file in " + dir + ": " + std::strerror(err));
  }
  SwappedKv s;
  s.owner_ = this;
  s.fd_ = fd;
  s.length_ = cache.length();
  s.bytes_ = bytes;
  s.long_rope_ = cache.long_rope();
  used_ += bytes;
  return s;
}

Status KvSwap::In(SwappedKv& swapped, int64_t capacity, KvCache* cache) {
  if (swapped.empty()) return InvalidArgument("nothing was swapped out");
  off_t off = 0;
  const bool ok = cache->FillRuns(swapped.length_, capacity, swapped.long_rope_,
                                  [&](uint8_t* p, size_t n) { return Transfer(pread, swapped.fd_, p, n, &off); });
  const int err = errno;
  swapped = SwappedKv();
  if (!ok) return Internal(std::string("cannot read a KV swap file back: ") + std::strerror(err));
  return Status::Ok();
}

}  // namespace phi4mm
