// A request's media between its parsing and the engine, in two steps so that memory is admitted
// before it is spent. PlanMedia reads each item's encoded bytes (base64 or --media-dir) and its
// header only: an image's size, a clip's rate and length; from them, what decoding and
// preprocessing will hold at their peak (PlanImage for images) and what stays held until the
// engine has encoded the item, and the image tokens, for an early context check. The server takes
// that peak from its media budget (waiting, with only the encoded bytes held, when it does not
// fit), then DecodeMedia decodes the items.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "api_error.h"
#include "media_input.h"
#include "phi4mm/preprocess/image_processor.h"
#include "phi4mm/runtime/media.h"

namespace phi4mm::server {

struct PlannedMedia {
  struct Item {
    MediaSource::Kind kind = MediaSource::kImage;
    std::string param;
    std::string bytes;  // encoded
    ImageSize image;    // images
    AudioInfo audio;    // clips (frames 0: the header does not say)
  };
  std::vector<Item> items;
  int64_t peak_bytes = 0;    // decoding and preprocessing all items, at most
  int64_t audio_peak_bytes = 0;  // the clips' share of it
  int64_t held_bytes = 0;    // what stays until the engine has encoded them (pixels, log-mel)
  int64_t image_tokens = 0;  // placeholder tokens of the images
};

// `image_options`: the crop size, patch size and crop limit the request's images will be
// processed with. Consumes the sources' strings.
ApiError PlanMedia(std::vector<MediaSource>& sources, const MediaLimits& limits,
                   const ImageProcessorOptions& image_options, PlannedMedia* out);

// Decodes the planned items into `media` in order (images, clips); with `image_pixels` false the
// images get their size only (enough to count their tokens). Stops with a 503-free "cancelled"
// error when *cancel turns true.
ApiError DecodeMedia(PlannedMedia& planned, const MediaLimits& limits, bool image_pixels,
                     const std::atomic<bool>* cancel, MediaInputs* media);

}  // namespace phi4mm::server
