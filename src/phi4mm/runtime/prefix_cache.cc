// PrefixCache: longest-prefix lookup over a small LRU list of finished requests' KV caches.
#include "phi4mm/runtime/prefix_cache.h"

#include <algorithm>

namespace phi4mm {

PrefixCache::Match PrefixCache::Find(LoraMode mode, bool long_rope, std::span<const uint64_t> keys,
                                     int64_t max_length) {
  std::lock_guard<std::mutex> l(mu_);
  ++stats_.lookups;
  stats_.query_tokens += std::min(static_cast<int64_t>(keys.size()), std::max<int64_t>(0, max_length));
  Match best;
  auto best_it = lru_.end();
  for (auto it = lru_.begin(); it != lru_.end(); ++it) {
    const Entry& e = **it;
    if (e.mode != mode || e.long_rope != long_rope) continue;
    const size_t n = std::min({e.keys.size(), keys.size(), static_cast<size_t>(std::max<int64_t>(0, max_length))});
    const size_t common =
        static_cast<size_t>(std::mismatch(e.keys.begin(), e.keys.begin() + n, keys.begin()).first - e.keys.begin());
    if (static_cast<int64_t>(common) > best.length) {
      best.length = static_cast<int64_t>(common);
      best.entry = *it;
      best_it = it;
    }
  }
  if (best.length > 0) {
    ++stats_.hits;
    stats_.hit_tokens += best.length;
    lru_.splice(lru_.begin(), lru_, best_it);
  }
  return best;
}

void PrefixCache::Insert(LoraMode mode, bool long_rope, std::vector<uint64_t> keys, const KvCache& cache) {
  const int64_t n = static_cast<int64_t>(keys.size());
  if (n == 0 || n > cache.length()) return;
  const int64_t bytes = n * 2 * static_cast<int64_t>(cache.row_bytes()) * cache.layers();
  if (bytes > max_bytes_) return;
  auto e = std::make_shared<Entry>();
  e->mode = mode;
  e->long_rope = long_rope;
  e->keys = std::move(keys);
  e->cache = cache.EmptyLike();
  e->cache.Reserve(n);
  if (!e->cache.CopyPrefixFrom(cache, n).ok()) return;
  std::lock_guard<std::mutex> l(mu_);
  // An entry whose keys are a prefix of the new one (the same chat, one turn earlier) is superseded.
  for (auto it = lru_.begin(); it != lru_.end();) {
    const Entry& o = **it;
    if (o.mode == mode && o.long_rope == long_rope && o.keys.size() <= e->keys.size() &&
        std::equal(o.keys.begin(), o.keys.end(), e->keys.begin())) {
      bytes_ -= static_cast<int64_t>(o.cache.bytes());
      it = lru_.erase(it);
    } else {
      ++it;
    }
  }
  bytes_ += static_cast<int64_t>(e->cache.bytes());
  lru_.push_front(std::move(e));
  while (bytes_ > max_bytes_ && !lru_.empty()) {
    bytes_ -= static_cast<int64_t>(lru_.back()->cache.bytes());
    lru_.pop_back();
    ++stats_.evictions;
  }
}

PrefixCacheStats PrefixCache::stats() const {
  std::lock_guard<std::mutex> l(mu_);
  PrefixCacheStats s = stats_;
  s.entries = static_cast<int64_t>(lru_.size());
  s.bytes = bytes_;
  return s;
}

void PrefixCache::Clear() {
  std::lock_guard<std::mutex> l(mu_);
  lru_.clear();
  bytes_ = 0;
}

}  // namespace phi4mm
