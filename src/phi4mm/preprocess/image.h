// Decoded images: 8-bit RGB pixels in row-major HWC order, from JPEG, PNG, BMP, GIF (first frame),
// PPM/PGM and WebP files or bytes. Grayscale becomes RGB; alpha is handled as the reference does
// (reference-spec §2.1). Decoding is bounded: the declared size is checked before any pixel
// buffer is allocated.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "phi4mm/base/status.h"

namespace phi4mm {

struct Image {
  int64_t width = 0;
  int64_t height = 0;
  std::vector<uint8_t> rgb;  // [height, width, 3]
};

struct ImageDecodeLimits {
  int64_t max_pixels = 178956970;  // Pillow's decompression-bomb limit (2 x 89478485)
};

Result<Image> DecodeImageFile(const std::string& path, const ImageDecodeLimits& limits = {});

struct ImageSize {
  int64_t width = 0, height = 0;
};
// The size an image declares, read from its header without decoding a pixel, with the checks
// DecodeImageBytes makes before it decodes (format, structure, the pixel limit): what decoding it
// will hold can be known, and refused, first.
Result<ImageSize> ReadImageSize(std::span<const uint8_t> bytes, const std::string& label,
                                const ImageDecodeLimits& limits = {});
// `label` names the source in error messages.
Result<Image> DecodeImageBytes(std::span<const uint8_t> bytes, const std::string& label,
                               const ImageDecodeLimits& limits = {});

}  // namespace phi4mm
