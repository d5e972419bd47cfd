// The encoder-output cache of the batched engine: the `vision` / `speech` features of an image or
// clip, keyed by the SHA-256 of its decoded pixels or samples together with every setting that
// changes the features (dynamic_hd and crop geometry for images; sample rate and the projection
// mode for audio; see ImageFeatureKey / AudioFeatureKey), so a chat that resends the same photo
// every turn runs SigLIP once. Byte limit with LRU eviction, hit and miss counters. Thread-safe.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "phi4mm/base/sha256.h"
#include "phi4mm/preprocess/audio.h"
#include "phi4mm/preprocess/image.h"

namespace phi4mm {

// Content keys: what identifies the features, not the bytes a client happened to send.
Digest ImageFeatureKey(const Image& image, int64_t dynamic_hd, int64_t crop_size, int64_t patch_size);
Digest AudioFeatureKey(const AudioClip& clip, bool with_image);

struct MediaCacheStats {
  int64_t hits = 0, misses = 0, entries = 0, bytes = 0, evictions = 0;
};

class MediaCache {
 public:
  using Features = std::shared_ptr<const std::vector<float>>;
  explicit MediaCache(int64_t max_bytes) : max_bytes_(max_bytes) {}
  // The cached features, or null (counted as a miss).
  Features Find(const Digest& key);
  void Insert(const Digest& key, Features features);
  MediaCacheStats stats() const;

 private:
  struct Item {
    Digest key;
    Features features;
  };
  const int64_t max_bytes_;
  mutable std::mutex mu_;
  std::list<Item> lru_;  // most recent first
  std::map<Digest, std::list<Item>::iterator> index_;
  int64_t bytes_ = 0;
  MediaCacheStats stats_;
};

}  // namespace phi4mm
