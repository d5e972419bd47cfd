// libFuzzer target for the image path: decodes arbitrary bytes with DecodeImageBytes (a small pixel
// limit keeps each run fast) and runs every decoded image through ProcessImage with a small
// geometry (crop 28, patch 14, dynamic_hd 4). Errors must come back as a Status with a message;
// a decoded image must have width*height*3 bytes; a processed one must have consistent sizes. Any
// crash, sanitizer report or abort is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "phi4mm/preprocess/image.h"
#include "phi4mm/preprocess/image_processor.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  phi4mm::ImageDecodeLimits limits;
  limits.max_pixels = 1 << 20;
  auto img = phi4mm::DecodeImageBytes(std::span<const uint8_t>(data, size), "fuzz input", limits);
  if (!img.ok()) {
    if (img.status().message().empty()) std::abort();
    return 0;
  }
  if (img->width < 1 || img->height < 1 || img->width * img->height > limits.max_pixels ||
      img->rgb.size() != static_cast<size_t>(img->width * img->height * 3)) {
    std::abort();
  }
  phi4mm::ImageProcessorOptions opts;
  opts.crop_size = 28;
  opts.patch_size = 14;
  opts.dynamic_hd = 4;
  auto p = phi4mm::ProcessImage(*img, opts);
  if (!p.ok()) {
    if (p.status().code() != phi4mm::StatusCode::kInvalidArgument) std::abort();
    return 0;
  }
  const int64_t crops = p->num_crops;
  if (crops < 2 || crops > 1 + opts.dynamic_hd ||
      p->pixel_values.size() != static_cast<size_t>(crops * 3 * 28 * 28) ||
      p->attention_mask.size() != static_cast<size_t>(crops * 2 * 2) || p->num_tokens < 1) {
    std::abort();
  }
  return 0;
}
