// JPEG decoding with libjpeg-turbo, configured as Pillow's JpegDecoder uses it (accurate integer
// IDCT, fancy upsampling, RGB or grayscale output), so decoded pixels equal what the reference
// processors see after Image.open(...).convert('RGB'). Corrupt data is reported, never fatal.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "phi4mm/base/status.h"
#include "phi4mm/preprocess/image.h"

namespace phi4mm::image_internal {

// `max_pixels` is checked against the header before the pixel buffer is allocated.
Result<Image> DecodeJpeg(std::span<const uint8_t> bytes, const std::string& label, int64_t max_pixels);

}  // namespace phi4mm::image_internal
