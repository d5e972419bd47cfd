// KvSwap and SwappedKv (kv_swap.h): pwrite/pread of the cache's runs, in KvCache::ForEachRun order.
#include "phi4mm/runtime/kv_swap.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

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

bool WriteAll(int fd, const uint8_t* p, size_t n, off_t* off) {
  while (n > 0) {
    const ssize_t w = pwrite(fd, p, n, *off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
    *off += w;
  }
  return true;
}

bool ReadAll(int fd, uint8_t* p, size_t n, off_t* off) {
  while (n > 0) {
    const ssize_t r = pread(fd, p, n, *off);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
    *off += r;
  }
  return true;
}

}  // namespace

SwappedKv::SwappedKv(SwappedKv&& o) noexcept
    : owner_(o.owner_), fd_(o.fd_), length_(o.length_), bytes_(o.bytes_), long_rope_(o.long_rope_) {
  o.fd_ = -1;
  o.owner_ = nullptr;
}

SwappedKv& SwappedKv::operator=(SwappedKv&& o) noexcept {
  if (this != &o) {
    this->~SwappedKv();
    owner_ = o.owner_;
    fd_ = o.fd_;
    length_ = o.length_;
    bytes_ = o.bytes_;
    long_rope_ = o.long_rope_;
    o.fd_ = -1;
    o.owner_ = nullptr;
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
  cache.ForEachRun([&](const uint8_t* p, size_t n) { ok = ok && WriteAll(fd, p, n, &off); });
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
                                  [&](uint8_t* p, size_t n) { return ReadAll(swapped.fd_, p, n, &off); });
  const int err = errno;
  swapped = SwappedKv();
  if (!ok) return Internal(std::string("cannot read a KV swap file back: ") + std::strerror(err));
  return Status::Ok();
}

}  // namespace phi4mm
