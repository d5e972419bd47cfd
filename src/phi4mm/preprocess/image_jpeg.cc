// libjpeg-turbo decoding. libjpeg reports fatal errors through a callback that must not return;
// it longjmps back to DecodeInto, whose frame holds no object with a destructor between setjmp and
// the jump (the caller owns every buffer), as the libjpeg documentation prescribes.
#include "phi4mm/preprocess/image_jpeg.h"

#include <csetjmp>
#include <cstdio>
#include <vector>

#include <jpeglib.h>

namespace phi4mm::image_internal {

namespace {

struct ErrorManager {
  jpeg_error_mgr pub;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void OnError(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

void OnMessage(j_common_ptr) {}  // warnings are not printed (the library never prints)

enum class Stage { kHeader, kPixels, kDone };

// Returns the stage reached; on failure `err->message` says why. `pixels` is resized (by the
// caller's vector) only after the header passed the size check.
Stage DecodeInto(const uint8_t* data, size_t size, int64_t max_pixels, ErrorManager* err, jpeg_decompress_struct* cinfo,
                 std::vector<uint8_t>* pixels, int* width, int* height, int* channels, bool* too_big) {
  volatile Stage stage = Stage::kHeader;
  cinfo->err = jpeg_std_error(&err->pub);
  err->pub.error_exit = OnError;
  err->pub.output_message = OnMessage;
  err->message[0] = '\0';
  if (setjmp(err->jump)) {
    jpeg_destroy_decompress(cinfo);
    return stage;
  }
  jpeg_create_decompress(cinfo);
  jpeg_mem_src(cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(cinfo, TRUE);
  const bool gray = cinfo->jpeg_color_space == JCS_GRAYSCALE;
  cinfo->out_color_space = gray ? JCS_GRAYSCALE : JCS_RGB;
  cinfo->dct_method = JDCT_ISLOW;
  cinfo->do_fancy_upsampling = TRUE;
  jpeg_calc_output_dimensions(cinfo);
  *width = static_cast<int>(cinfo->output_width);
  *height = static_cast<int>(cinfo->output_height);
  *channels = cinfo->output_components;
  if (*width < 1 || *height < 1 || static_cast<int64_t>(*width) > max_pixels / *height) {
    *too_big = true;
    jpeg_destroy_decompress(cinfo);
    return Stage::kHeader;
  }
  stage = Stage::kPixels;
  pixels->resize(static_cast<size_t>(*width) * static_cast<size_t>(*height) * static_cast<size_t>(*channels));
  jpeg_start_decompress(cinfo);
  const size_t stride = static_cast<size_t>(*width) * static_cast<size_t>(*channels);
  while (cinfo->output_scanline < cinfo->output_height) {
    JSAMPROW row = pixels->data() + cinfo->output_scanline * stride;
    jpeg_read_scanlines(cinfo, &row, 1);
  }
  jpeg_finish_decompress(cinfo);
  jpeg_destroy_decompress(cinfo);
  return Stage::kDone;
}

}  // namespace

Result<Image> DecodeJpeg(std::span<const uint8_t> bytes, const std::string& label, int64_t max_pixels) {
  ErrorManager err;
  jpeg_decompress_struct cinfo;
  std::vector<uint8_t> pixels;
  int w = 0, h = 0, channels = 0;
  bool too_big = false;
  const Stage stage = DecodeInto(bytes.data(), bytes.size(), max_pixels, &err, &cinfo, &pixels, &w, &h, &channels,
                                 &too_big);
  if (too_big)
    return InvalidArgument(label + ": the JPEG declares " + std::to_string(w) + "x" + std::to_string(h) +
                           " pixels, more than the limit of " + std::to_string(max_pixels) + "; downscale it first");
  if (stage != Stage::kDone)
    return DataLoss(label + ": could not decode the JPEG " + (stage == Stage::kHeader ? "header" : "data") + " (" +
                    err.message + "); the file is corrupt or truncated");
  if (channels != 1 && channels != 3)
    return Unsupported(label + ": JPEG with " + std::to_string(channels) + " channels is not supported");
  Image img;
  img.width = w;
  img.height = h;
  if (channels == 3) {
    img.rgb = std::move(pixels);
  } else {
    img.rgb.resize(pixels.size() * 3);
    for (size_t i = 0; i < pixels.size(); ++i) img.rgb[3 * i] = img.rgb[3 * i + 1] = img.rgb[3 * i + 2] = pixels[i];
  }
  return img;
}

}  // namespace phi4mm::image_internal
