// PlanMedia and DecodeMedia (media_admission.h). The audio estimate: the decoded samples at the
// file's rate (4 bytes each, mono), the 16 kHz resampled copy, and the log-mel frames (100 a
// second, 80 floats each), which stay until the clip is encoded.
#include "media_admission.h"

#include <span>

namespace phi4mm::server {

namespace {

constexpr int64_t kResampledRate = 16000;
constexpr int64_t kMelBytesPerSecond = 100 * 80 * 4;

std::span<const uint8_t> Bytes(const std::string& s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

}  // namespace

ApiError PlanMedia(std::vector<MediaSource>& sources, const MediaLimits& limits,
                   const ImageProcessorOptions& image_options, PlannedMedia* out) {
  for (MediaSource& src : sources) {
    PlannedMedia::Item item;
    item.kind = src.kind;
    item.param = src.inline_data && !src.uploaded ? src.param + ".data" : src.param;
    if (ApiError e = MediaBytes(src, limits, &item.bytes); !e.ok()) return e;
    src.data.clear();
    src.url.clear();
    if (item.kind == MediaSource::kImage) {
      ImageDecodeLimits il;
      il.max_pixels = limits.max_image_pixels;
      auto size = ReadImageSize(Bytes(item.bytes), "image", il);
      if (!size.ok()) return ImageError(size.status(), item.param);
      item.image = *size;
      auto plan = PlanImage(size->width, size->height, image_options);
      if (!plan.ok()) return ImageError(plan.status(), item.param);
      out->peak_bytes += plan->peak_bytes;
      out->held_bytes += plan->pixel_bytes;
      out->image_tokens += plan->num_tokens;
    } else {
      auto info = ReadAudioInfo(Bytes(item.bytes), "audio", limits.max_audio_seconds);
      if (!info.ok()) return AudioError(info.status(), item.param);
      item.audio = *info;
      // A header without a length (some MP3s): the longest clip the server takes.
      const int64_t frames = info->frames > 0 ? info->frames : limits.max_audio_seconds * info->sample_rate;
      const int64_t seconds = (frames + info->sample_rate - 1) / info->sample_rate;
      const int64_t peak = frames * 4 + seconds * (kResampledRate * 4 + kMelBytesPerSecond) +
                           static_cast<int64_t>(item.bytes.size());
      out->peak_bytes += peak;
      out->audio_peak_bytes += peak;
      out->held_bytes += seconds * kMelBytesPerSecond;
      out->items.push_back(std::move(item));
      continue;
    }
    out->peak_bytes += static_cast<int64_t>(item.bytes.size());
    out->items.push_back(std::move(item));
  }
  return {};
}

ApiError DecodeMedia(PlannedMedia& planned, const MediaLimits& limits, bool image_pixels,
                     const std::atomic<bool>* cancel, MediaInputs* media) {
  for (PlannedMedia::Item& item : planned.items) {
    if (cancel != nullptr && cancel->load()) return ApiError{499, "cancelled", "the client went away", "", "cancelled", 0};
    if (item.kind == MediaSource::kImage) {
      if (!image_pixels) {
        Image sized;
        sized.width = item.image.width;
        sized.height = item.image.height;
        media->images.push_back(std::move(sized));
      } else {
        ImageDecodeLimits il;
        il.max_pixels = limits.max_image_pixels;
        auto img = DecodeImageBytes(Bytes(item.bytes), "image", il);
        if (!img.ok()) return ImageError(img.status(), item.param);
        media->images.push_back(std::move(img).value());
      }
    } else {
      auto clip = DecodeAudioBytes(Bytes(item.bytes), "audio", limits.max_audio_seconds);
      if (!clip.ok()) return AudioError(clip.status(), item.param);
      media->audios.push_back(std::move(clip).value());
    }
    std::string().swap(item.bytes);
  }
  return {};
}

}  // namespace phi4mm::server
