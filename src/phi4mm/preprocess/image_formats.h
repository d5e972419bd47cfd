// Private container inspection for the image decoder: recognises the format from its first bytes,
// names formats phi4mm does not decode, walks the container structure (PNG chunks with their CRCs,
// JPEG markers, GIF blocks, BMP and PNM headers, the RIFF size of WebP) to tell a truncated or
// corrupt file apart before decoding, and reads the declared size so that it can be checked before
// any pixel buffer is allocated. Not part of the public API.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "phi4mm/base/status.h"

namespace phi4mm::image_internal {

enum class Format { kJpeg, kPng, kBmp, kGif, kPnm, kWebp };

struct FormatInfo {
  Format format = Format::kPng;
  int64_t width = 0;   // declared size; 0 when the container is checked by its decoder (WebP)
  int64_t height = 0;
  uint64_t min_bytes = 0;   // BMP/PNM: bytes the declared pixels need (checked after the size limit)
  bool png_gray16 = false;
  // GIF whose first frame declares a transparent colour index: Pillow's convert('RGB') shows that
  // index's palette colour where stb_image leaves transparent black (alpha 0).
  bool gif_transparency = false;
  uint8_t gif_transparent_rgb[3] = {0, 0, 0};  // 16-bit grayscale PNG: Pillow mode I;16, clipped to 255 by convert('RGB')
};

// OK with the format when the bytes look like a complete file of a supported format; DataLoss for
// a truncated or corrupt one; Unsupported (naming what was found) for other formats and variants.
Result<FormatInfo> InspectImage(std::span<const uint8_t> bytes, const std::string& label);

}  // namespace phi4mm::image_internal
