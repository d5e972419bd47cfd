// The prefix cache of the batched engine: KV caches of finished requests, kept so that the next
// request of a chat — which resends the whole history, images included — prefills only what is
// new. A cached prefix is identified per position by a 64-bit key (the token id for text; for a
// media placeholder, the media's content digest and the row index, see PositionKeys) plus what
// else changes the cached rows: the LoRA mode and the rotary table (the audio projection mode is
// part of each audio digest). A lookup finds the entry with the longest common prefix under the
// same mode and table; anything else never matches. Byte limit with LRU eviction, hit counters.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "phi4mm/models/decoder.h"
#include "phi4mm/models/lora_mode.h"

namespace phi4mm {

struct PrefixCacheStats {
  int64_t lookups = 0, hits = 0, hit_tokens = 0, entries = 0, bytes = 0, evictions = 0;
  int64_t query_tokens = 0;  // prompt positions looked up (what hit_tokens is a share of)
};

class PrefixCache {
 public:
  explicit PrefixCache(int64_t max_bytes) : max_bytes_(max_bytes) {}

  struct Entry {
    LoraMode mode = LoraMode::kNone;
    bool long_rope = false;
    std::vector<uint64_t> keys;  // one per cached position
    KvCache cache;               // exactly keys.size() positions
  };
  struct Match {
    std::shared_ptr<const Entry> entry;
    int64_t length = 0;  // matching positions (0: no match)
  };
  // The longest cached prefix of `keys` (at most max_length positions) under `mode` / `long_rope`.
  Match Find(LoraMode mode, bool long_rope, std::span<const uint64_t> keys, int64_t max_length);
  // Stores the first keys.size() positions of `cache` (copied into an exact-size cache); evicts the
  // least recently used entries over the byte limit. An entry larger than the limit is not kept.
  void Insert(LoraMode mode, bool long_rope, std::vector<uint64_t> keys, const KvCache& cache);
  PrefixCacheStats stats() const;
  void Clear();

 private:
  const int64_t max_bytes_;
  mutable std::mutex mu_;
  std::list<std::shared_ptr<const Entry>> lru_;  // most recent first
  int64_t bytes_ = 0;
  PrefixCacheStats stats_;
};

}  // namespace phi4mm
