// Image decoding (image.h): recognises the container from its first bytes, validates its structure
// and declared size before any pixel buffer is allocated, then decodes with libjpeg-turbo (JPEG,
// exactly as Pillow), stb_image (PNG, BMP, GIF, PNM) or libwebp (WebP) and converts to 8-bit RGB the way Pillow's
// `Image.open(...).convert('RGB')` does, which is what the reference processors see: alpha is
// dropped without compositing, palettes are looked up ignoring transparency, 16-bit RGB keeps the
// high byte, 16-bit grayscale is clipped to 255, and EXIF orientation is not applied.
#include "phi4mm/preprocess/image.h"

#include <stb/stb_image.h>
#include <webp/decode.h>
#include <webp/demux.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <string>

#include "phi4mm/preprocess/image_formats.h"
#include "phi4mm/preprocess/image_jpeg.h"

namespace phi4mm {
namespace {

std::string PixelsString(int64_t w, int64_t h) {
  return std::to_string(w) + "x" + std::to_string(h) + " (" + std::to_string(w * h) + " pixels)";
}

Status CheckSize(int64_t w, int64_t h, const std::string& label, const ImageDecodeLimits& limits) {
  if (w < 1 || h < 1) {
    return DataLoss(label + ": the header declares an empty image of " + std::to_string(w) + "x" +
                    std::to_string(h) + " pixels; the file is corrupt");
  }
  if (w > limits.max_pixels / h) {
    return InvalidArgument(label + ": the image declares " + PixelsString(w, h) +
                           ", more than the limit of " + std::to_string(limits.max_pixels) +
                           " pixels (Pillow's decompression-bomb limit); downscale it first");
  }
  return Status::Ok();
}

Result<Image> FromStb(stbi_uc* pixels, int w, int h, const std::string& what, const std::string& label) {
  if (pixels == nullptr) {
    const char* why = stbi_failure_reason();
    return DataLoss(label + ": could not decode the " + what + " data (" + (why ? why : "unknown error") +
                    "); the file is corrupt or truncated");
  }
  std::unique_ptr<stbi_uc, void (*)(void*)> owner(pixels, stbi_image_free);
  Image img;
  img.width = w;
  img.height = h;
  img.rgb.assign(pixels, pixels + static_cast<size_t>(w) * static_cast<size_t>(h) * 3);
  return img;
}

// Pillow opens a 16-bit grayscale PNG as mode I;16 and convert('RGB') clips each value to 255.
Result<Image> DecodeGray16Png(std::span<const uint8_t> bytes, const std::string& label) {
  int w = 0, h = 0, comp = 0;
  stbi_us* px = stbi_load_16_from_memory(bytes.data(), static_cast<int>(bytes.size()), &w, &h, &comp, 1);
  if (px == nullptr) {
    const char* why = stbi_failure_reason();
    return DataLoss(label + ": could not decode the PNG data (" + (why ? why : "unknown error") +
                    "); the file is corrupt or truncated");
  }
  std::unique_ptr<stbi_us, void (*)(void*)> owner(px, stbi_image_free);
  Image img;
  img.width = w;
  img.height = h;
  img.rgb.resize(static_cast<size_t>(w) * static_cast<size_t>(h) * 3);
  for (size_t i = 0; i < static_cast<size_t>(w) * static_cast<size_t>(h); ++i) {
    const uint8_t v = px[i] > 255 ? 255 : static_cast<uint8_t>(px[i]);
    img.rgb[3 * i] = img.rgb[3 * i + 1] = img.rgb[3 * i + 2] = v;
  }
  return img;
}

Result<Image> DecodeWithStb(std::span<const uint8_t> bytes, const std::string& what, const std::string& label,
                            const ImageDecodeLimits& limits) {
  const int len = static_cast<int>(bytes.size());
  int w = 0, h = 0, comp = 0;
  if (!stbi_info_from_memory(bytes.data(), len, &w, &h, &comp)) {
    const char* why = stbi_failure_reason();
    return DataLoss(label + ": could not read the " + what + " header (" + (why ? why : "unknown error") +
                    "); the file is corrupt or truncated");
  }
  PHI4MM_RETURN_IF_ERROR(CheckSize(w, h, label, limits));
  int dw = 0, dh = 0, dcomp = 0;
  stbi_uc* px = stbi_load_from_memory(bytes.data(), len, &dw, &dh, &dcomp, 3);
  return FromStb(px, dw, dh, what, label);
}

// stb_image leaves the transparent pixels of a GIF's first frame as RGBA (0, 0, 0, 0); Pillow
// keeps the palette index, and convert('RGB') shows that index's palette colour.
Result<Image> DecodeGifWithTransparency(std::span<const uint8_t> bytes, const image_internal::FormatInfo& info,
                                        const std::string& label, const ImageDecodeLimits& limits) {
  const int len = static_cast<int>(bytes.size());
  int w = 0, h = 0, comp = 0;
  if (!stbi_info_from_memory(bytes.data(), len, &w, &h, &comp)) {
    return DataLoss(label + ": could not read the GIF header; the file is corrupt or truncated");
  }
  PHI4MM_RETURN_IF_ERROR(CheckSize(w, h, label, limits));
  stbi_uc* px = stbi_load_from_memory(bytes.data(), len, &w, &h, &comp, 4);
  if (px == nullptr) return FromStb(px, w, h, "GIF", label);
  std::unique_ptr<stbi_uc, void (*)(void*)> owner(px, stbi_image_free);
  Image img;
  img.width = w;
  img.height = h;
  const size_t n = static_cast<size_t>(w) * static_cast<size_t>(h);
  img.rgb.resize(n * 3);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* src = px[4 * i + 3] == 0 ? info.gif_transparent_rgb : px + 4 * i;
    std::memcpy(&img.rgb[3 * i], src, 3);
  }
  return img;
}

Result<Image> DecodeWebp(std::span<const uint8_t> bytes, const std::string& label, const ImageDecodeLimits& limits) {
  int w = 0, h = 0;
  if (!WebPGetInfo(bytes.data(), bytes.size(), &w, &h)) {
    return DataLoss(label + ": could not read the WebP header; the file is corrupt or truncated");
  }
  PHI4MM_RETURN_IF_ERROR(CheckSize(w, h, label, limits));
  // Pillow decodes every WebP (still or animated) with WebPAnimDecoder in RGBA and keeps the first
  // frame; convert('RGB') then drops alpha.
  WebPData data{bytes.data(), bytes.size()};
  WebPAnimDecoderOptions opts;
  if (!WebPAnimDecoderOptionsInit(&opts)) return Internal(label + ": libwebp version mismatch");
  opts.color_mode = MODE_RGBA;
  opts.use_threads = 0;
  std::unique_ptr<WebPAnimDecoder, void (*)(WebPAnimDecoder*)> dec(WebPAnimDecoderNew(&data, &opts),
                                                                   WebPAnimDecoderDelete);
  if (dec == nullptr) {
    return DataLoss(label + ": could not parse the WebP container; the file is corrupt or truncated");
  }
  WebPAnimInfo info;
  if (!WebPAnimDecoderGetInfo(dec.get(), &info)) return DataLoss(label + ": could not read the WebP info");
  PHI4MM_RETURN_IF_ERROR(CheckSize(info.canvas_width, info.canvas_height, label, limits));
  uint8_t* rgba = nullptr;
  int timestamp = 0;
  if (!WebPAnimDecoderGetNext(dec.get(), &rgba, &timestamp) || rgba == nullptr) {
    return DataLoss(label + ": could not decode the WebP image data; the file is corrupt or truncated");
  }
  Image img;
  img.width = info.canvas_width;
  img.height = info.canvas_height;
  const size_t n = static_cast<size_t>(img.width) * static_cast<size_t>(img.height);
  img.rgb.resize(n * 3);
  for (size_t i = 0; i < n; ++i) std::memcpy(&img.rgb[3 * i], rgba + 4 * i, 3);
  return img;
}

// The checks every reading of image bytes starts with (empty, over 2 GiB, the limits themselves),
// then the container's inspection.
Result<image_internal::FormatInfo> Inspect(std::span<const uint8_t> bytes, const std::string& label,
                                           const ImageDecodeLimits& limits) {
  if (bytes.empty()) {
    return DataLoss(label + " is empty (0 bytes); expected a JPEG, PNG, BMP, GIF, PPM/PGM or WebP image");
  }
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max())) {
    return InvalidArgument(label + " is " + std::to_string(bytes.size()) +
                           " bytes; image files over 2 GiB are not supported");
  }
  if (limits.max_pixels < 1) return InvalidArgument("ImageDecodeLimits.max_pixels must be positive");
  PHI4MM_ASSIGN_OR_RETURN(const image_internal::FormatInfo info, image_internal::InspectImage(bytes, label));
  return info;
}

}  // namespace

Result<Image> DecodeImageBytes(std::span<const uint8_t> bytes, const std::string& label,
                               const ImageDecodeLimits& limits) {
  PHI4MM_ASSIGN_OR_RETURN(const image_internal::FormatInfo info, Inspect(bytes, label, limits));
  if (info.width > 0 && info.height > 0) PHI4MM_RETURN_IF_ERROR(CheckSize(info.width, info.height, label, limits));
  if (info.min_bytes > bytes.size()) {
    return DataLoss(label + ": the file is truncated (it holds " + std::to_string(bytes.size()) + " bytes, its " +
                    std::to_string(info.width) + "x" + std::to_string(info.height) + " pixels need " +
                    std::to_string(info.min_bytes) + "); re-export or re-download it");
  }
  switch (info.format) {
    case image_internal::Format::kWebp:
      return DecodeWebp(bytes, label, limits);
    case image_internal::Format::kPng:
      if (info.png_gray16) return DecodeGray16Png(bytes, label);
      return DecodeWithStb(bytes, "PNG", label, limits);
    case image_internal::Format::kJpeg:
      return image_internal::DecodeJpeg(bytes, label, limits.max_pixels);
    case image_internal::Format::kBmp:
      return DecodeWithStb(bytes, "BMP", label, limits);
    case image_internal::Format::kGif:
      return info.gif_transparency ? DecodeGifWithTransparency(bytes, info, label, limits)
                                   : DecodeWithStb(bytes, "GIF", label, limits);
    case image_internal::Format::kPnm:
      return DecodeWithStb(bytes, "PPM/PGM", label, limits);
  }
  return Internal(label + ": unhandled image format");
}

Result<ImageSize> ReadImageSize(std::span<const uint8_t> bytes, const std::string& label,
                                const ImageDecodeLimits& limits) {
  PHI4MM_ASSIGN_OR_RETURN(const image_internal::FormatInfo info, Inspect(bytes, label, limits));
  ImageSize size{info.width, info.height};
  if (info.format == image_internal::Format::kWebp) {
    int w = 0, h = 0;
    if (!WebPGetInfo(bytes.data(), bytes.size(), &w, &h)) {
      return DataLoss(label + ": could not read the WebP header; the file is corrupt or truncated");
    }
    size = {w, h};
  }
  if (size.width < 1 || size.height < 1) {
    // A container whose size only its decoder reads (stb's header reader for the formats above).
    int w = 0, h = 0, comp = 0;
    if (!stbi_info_from_memory(bytes.data(), static_cast<int>(bytes.size()), &w, &h, &comp)) {
      return DataLoss(label + ": could not read the image header; the file is corrupt or truncated");
    }
    size = {w, h};
  }
  PHI4MM_RETURN_IF_ERROR(CheckSize(size.width, size.height, label, limits));
  return size;
}

Result<Image> DecodeImageFile(const std::string& path, const ImageDecodeLimits& limits) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) return NotFound("cannot open image file '" + path + "': " + std::strerror(errno));
  const std::streamoff size = f.tellg();
  if (size < 0) return DataLoss("cannot read image file '" + path + "'");
  if (size > std::numeric_limits<int>::max()) {
    return InvalidArgument("image file '" + path + "' is " + std::to_string(size) +
                           " bytes; image files over 2 GiB are not supported");
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  f.seekg(0);
  if (size > 0 && !f.read(reinterpret_cast<char*>(bytes.data()), size)) {
    return DataLoss("cannot read image file '" + path + "'");
  }
  return DecodeImageBytes(bytes, "image file '" + path + "'", limits);
}

}  // namespace phi4mm
