// MediaCache and the content keys of images and clips.
#include "phi4mm/runtime/media_cache.h"

namespace phi4mm {

Digest ImageFeatureKey(const Image& image, int64_t dynamic_hd, int64_t crop_size, int64_t patch_size) {
  Sha256 h;
  h.Update("image", 5);
  h.UpdateValue(image.width);
  h.UpdateValue(image.height);
  h.UpdateValue(dynamic_hd);
  h.UpdateValue(crop_size);
  h.UpdateValue(patch_size);
  h.Update(image.rgb.data(), image.rgb.size());
  return h.Finish();
}

Digest AudioFeatureKey(const AudioClip& clip, bool with_image) {
  Sha256 h;
  h.Update("audio", 5);
  h.UpdateValue(clip.sample_rate);
  const uint8_t projection = with_image ? 1 : 0;
  h.UpdateValue(projection);
  h.Update(clip.samples.data(), clip.samples.size() * sizeof(float));
  return h.Finish();
}

MediaCache::Features MediaCache::Find(const Digest& key) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = index_.find(key);
  if (it == index_.end()) {
    ++stats_.misses;
    return nullptr;
  }
  ++stats_.hits;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->features;
}

void MediaCache::Insert(const Digest& key, Features features) {
  if (!features) return;
  const int64_t bytes = static_cast<int64_t>(features->size() * sizeof(float));
  if (bytes > max_bytes_) return;
  std::lock_guard<std::mutex> l(mu_);
  if (auto it = index_.find(key); it != index_.end()) {
    bytes_ -= static_cast<int64_t>(it->second->features->size() * sizeof(float));
    lru_.erase(it->second);
    index_.erase(it);
  }
  lru_.push_front({key, std::move(features)});
  index_[key] = lru_.begin();
  bytes_ += bytes;
  while (bytes_ > max_bytes_ && !lru_.empty()) {
    bytes_ -= static_cast<int64_t>(lru_.back().features->size() * sizeof(float));
    index_.erase(lru_.back().key);
    lru_.pop_back();
    ++stats_.evictions;
  }
}

MediaCacheStats MediaCache::stats() const {
  std::lock_guard<std::mutex> l(mu_);
  MediaCacheStats s = stats_;
  s.entries = static_cast<int64_t>(lru_.size());
  s.bytes = bytes_;
  return s;
}

}  // namespace phi4mm
