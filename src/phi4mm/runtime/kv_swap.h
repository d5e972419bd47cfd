// Where the batched engine puts the KV cache of a sequence it preempts: an unnamed file in a
// directory of the operator's (O_TMPFILE, gone when closed), within a byte limit. Swapping out
// writes the cached positions and frees their memory; swapping in reads them back bit for bit, so
// the sequence continues exactly as if it had never left (recomputing them instead would cost a
// prefill of everything so far, minutes on a CPU for long answers, and would be exact only where
// a multi-row step equals the one-row one bit for bit). Engine thread only (used() from any).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "phi4mm/base/status.h"
#include "phi4mm/models/decoder.h"

namespace phi4mm {

class KvSwap;

// One sequence's swapped-out cache; closing it (destruction) frees its file and its share of the
// limit.
class SwappedKv {
 public:
  SwappedKv() = default;
  SwappedKv(SwappedKv&& o) noexcept;
  SwappedKv& operator=(SwappedKv&& o) noexcept;
  SwappedKv(const SwappedKv&) = delete;
  SwappedKv& operator=(const SwappedKv&) = delete;
  ~SwappedKv();
  bool empty() const { return fd_ < 0; }
  int64_t length() const { return length_; }
  int64_t bytes() const { return bytes_; }

 private:
  friend class KvSwap;
  KvSwap* owner_ = nullptr;
  int fd_ = -1;
  int64_t length_ = 0, bytes_ = 0;
  bool long_rope_ = false;
};

class KvSwap {
 public:
  // `dir` empty: the system's temporary directory. `limit_bytes` 0: swapping is off.
  KvSwap(std::string dir, int64_t limit_bytes) : dir_(std::move(dir)), limit_(limit_bytes) {}
  // Writes the cache's positions out; the caller then frees the cache. ResourceExhausted when the
  // limit has no room, an error naming the directory when the file cannot be made or written.
  Result<SwappedKv> Out(const KvCache& cache);
  // Reads a swapped cache back into `cache` (an empty cache of the right shape), with room for
  // `capacity` positions; the swap file is freed.
  Status In(SwappedKv& swapped, int64_t capacity, KvCache* cache);
  int64_t used() const { return used_.load(); }  // any thread
  int64_t limit() const { return limit_; }

 private:
  friend class SwappedKv;
  std::string dir_;
  int64_t limit_;
  std::atomic<int64_t> used_{0};
};

}  // namespace phi4mm
