// The Phi-4-multimodal image processor (reference: the original processing_phi4mm.py
// Phi4MMImageProcessor.{dynamic_preprocess, find_closest_aspect_ratio, preprocess}, which
// transformers 4.57.1's Phi4MultimodalImageProcessorFast copies; reference-spec §2). Where the two
// differ (the HD resize kernel, the order of the normalisation arithmetic) this follows the
// original; docs/reference-deviations.md ("Images") says why.
#include "phi4mm/preprocess/image_processor.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <utility>

#include "phi4mm/preprocess/image_resize.h"

namespace phi4mm {
namespace {

// Bounds that keep every size product far from overflow; the real model uses 448, 14 and 36.
constexpr int64_t kMaxCropSize = 4096;
constexpr int64_t kMaxDynamicHd = 1024;
// The reference rejects a resized side under this many pixels ("the aspect ratio is very extreme").
constexpr int64_t kMinResizedSide = 10;

struct Grid {
  int64_t gw = 1, gh = 1;  // crops along the width and the height
};

// Reference: find_closest_aspect_ratio + the target_ratios of dynamic_preprocess. Candidates (i, j)
// with 1 <= i*j <= max_num are visited in order of increasing i*j; a strictly closer ratio wins, an
// equally close one replaces the best only if area > 0.5 * S^2 * i * j. Within one product the
// reference visits a Python set in hash order; we visit increasing i. The order matters only if two
// ratios with the same product tie for the minimum, which cannot happen: between any two of them
// lies a ratio of the candidate set strictly closer to their midpoint (checked exhaustively for
// max_num <= 64 by tools/reference/make_image_fixtures.py --check-ties).
Grid ClosestAspectRatio(int64_t width, int64_t height, int64_t max_num, int64_t crop) {
  const double aspect = static_cast<double>(width) / static_cast<double>(height);
  const double area = static_cast<double>(width) * static_cast<double>(height);
  Grid best;
  double best_diff = std::numeric_limits<double>::infinity();
  for (int64_t p = 1; p <= max_num; ++p) {
    for (int64_t i = 1; i <= p; ++i) {
      if (p % i != 0) continue;
      const int64_t j = p / i;
      const double diff = std::fabs(aspect - static_cast<double>(i) / static_cast<double>(j));
      if (diff < best_diff) {
        best_diff = diff;
        best = {i, j};
      } else if (diff == best_diff &&
                 area > 0.5 * static_cast<double>(crop) * static_cast<double>(crop) *
                            static_cast<double>(i) * static_cast<double>(j)) {
        best = {i, j};
      }
    }
  }
  return best;
}

std::string FormatRatio(int64_t w, int64_t h) {
  char buf[64];
  if (w >= h) {
    std::snprintf(buf, sizeof buf, "%.4g:1", static_cast<double>(w) / static_cast<double>(h));
  } else {
    std::snprintf(buf, sizeof buf, "1:%.4g", static_cast<double>(h) / static_cast<double>(w));
  }
  return buf;
}

// The dynamic-HD geometry of a W x H image: its crop grid, the resized size and the padding.
struct Geometry {
  Grid g;
  int64_t S = 0, patch = 0, m = 0, W = 0, H = 0;
  int64_t target_w = 0, target_h = 0, new_w = 0, new_h = 0, pad_w = 0, pad_h = 0;
};

Result<Geometry> ComputeGeometry(int64_t W, int64_t H, const ImageProcessorOptions& opts) {
  if (opts.crop_size < 1 || opts.crop_size > kMaxCropSize) {
    return InvalidArgument("image processor crop_size " + std::to_string(opts.crop_size) +
                           " is out of range [1, " + std::to_string(kMaxCropSize) + "]");
  }
  if (opts.patch_size < 1 || opts.crop_size % opts.patch_size != 0) {
    return InvalidArgument("image processor patch_size " + std::to_string(opts.patch_size) +
                           " must be positive and divide crop_size " + std::to_string(opts.crop_size));
  }
  if (opts.dynamic_hd < 1 || opts.dynamic_hd > kMaxDynamicHd) {
    return InvalidArgument("image processor dynamic_hd " + std::to_string(opts.dynamic_hd) +
                           " is out of range [1, " + std::to_string(kMaxDynamicHd) + "]");
  }
  if (W < 1 || H < 1) {
    return InvalidArgument("image of " + std::to_string(W) + "x" + std::to_string(H) + " pixels: both sides must be >= 1");
  }
  Geometry geo;
  geo.S = opts.crop_size;
  geo.patch = opts.patch_size;
  geo.m = geo.S / geo.patch;  // mask_size: patches per crop side
  geo.W = W;
  geo.H = H;
  const int64_t S = geo.S;

  // Reference: dynamic_preprocess. The ceil grid if it has at most dynamic_hd crops, else the
  // closest aspect ratio among grids of at most dynamic_hd crops.
  Grid& g = geo.g;
  const int64_t w_crops = (W + S - 1) / S, h_crops = (H + S - 1) / S;
  if (w_crops > opts.dynamic_hd || h_crops > opts.dynamic_hd || w_crops * h_crops > opts.dynamic_hd) {
    g = ClosestAspectRatio(W, H, opts.dynamic_hd, S);
  } else {
    g = {w_crops, h_crops};
  }
  geo.target_w = S * g.gw;
  geo.target_h = S * g.gh;
  // Python: ratio = target / orig (double); int(orig * ratio) truncates toward zero.
  const double ratio_w = static_cast<double>(geo.target_w) / static_cast<double>(W);
  const double ratio_h = static_cast<double>(geo.target_h) / static_cast<double>(H);
  if (ratio_w < ratio_h) {
    geo.new_w = geo.target_w;
    geo.new_h = static_cast<int64_t>(static_cast<double>(H) * ratio_w);
    geo.pad_w = 0;
    geo.pad_h = geo.target_h - geo.new_h;
  } else {
    geo.new_w = static_cast<int64_t>(static_cast<double>(W) * ratio_h);
    geo.new_h = geo.target_h;
    geo.pad_w = geo.target_w - geo.new_w;
    geo.pad_h = 0;
  }
  if (std::min(geo.new_h, geo.target_h) < kMinResizedSide || std::min(geo.new_w, geo.target_w) < kMinResizedSide) {
    return InvalidArgument("image of " + std::to_string(W) + "x" + std::to_string(H) +
                           " pixels has an aspect ratio (" + FormatRatio(W, H) +
                           ") that is too extreme: fitted to a " + std::to_string(g.gw) + "x" +
                           std::to_string(g.gh) + " grid of " + std::to_string(S) +
                           "-pixel crops it would be resized to " + std::to_string(geo.new_w) + "x" +
                           std::to_string(geo.new_h) + ", and the reference rejects a side under " +
                           std::to_string(kMinResizedSide) + " pixels; crop or pad the image first");
  }
  return geo;
}

// The image's shape fields and attention masks [1 + gh*gw, m, m]: the global view is all ones;
// crop (r, c) takes its block of the canvas mask, whose patch columns/rows fully inside the
// padding are 0 (the original compares with the literal 14, the patch size of the real model).
void SetShapeAndMasks(const Geometry& geo, ProcessedImage* out) {
  const Grid& g = geo.g;
  const int64_t m = geo.m;
  out->num_crops = 1 + g.gw * g.gh;
  out->crop_size = geo.S;
  out->patches_per_side = m;
  out->hd_height = geo.target_h;
  out->hd_width = geo.target_w;
  const int64_t mask_h = m * g.gh, mask_w = m * g.gw;
  const int64_t zero_cols = geo.pad_w >= geo.patch ? geo.pad_w / geo.patch : 0;
  const int64_t zero_rows = geo.pad_h >= geo.patch ? geo.pad_h / geo.patch : 0;
  const size_t mask_elems = static_cast<size_t>(m) * static_cast<size_t>(m);
  out->attention_mask.assign(static_cast<size_t>(out->num_crops) * mask_elems, 1);
  auto canvas_mask = [&](int64_t row, int64_t col) -> uint8_t {
    return (row >= mask_h - zero_rows || col >= mask_w - zero_cols) ? 0 : 1;
  };
  for (int64_t r = 0; r < g.gh; ++r) {
    for (int64_t c = 0; c < g.gw; ++c) {
      uint8_t* dst = out->attention_mask.data() + static_cast<size_t>(1 + r * g.gw + c) * mask_elems;
      for (int64_t y = 0; y < m; ++y) {
        for (int64_t x = 0; x < m; ++x) dst[y * m + x] = canvas_mask(r * m + y, c * m + x);
      }
    }
  }
}

}  // namespace

Result<ImagePlan> PlanImage(int64_t width, int64_t height, const ImageProcessorOptions& opts) {
  PHI4MM_ASSIGN_OR_RETURN(const Geometry geo, ComputeGeometry(width, height, opts));
  ProcessedImage shape;
  SetShapeAndMasks(geo, &shape);
  ImagePlan plan;
  plan.num_crops = shape.num_crops;
  plan.num_tokens = CountImageTokens(shape);
  const int64_t crop_bytes = 3 * geo.S * geo.S * static_cast<int64_t>(sizeof(float));
  plan.pixel_bytes = plan.num_crops * crop_bytes + static_cast<int64_t>(shape.attention_mask.size());
  // ProcessImage at its peak: the decoded RGB, the resized RGB, the normalised canvas, the global
  // view's bicubic result, and the crops.
  plan.peak_bytes = width * height * 3 + geo.new_w * geo.new_h * 3 +
                    3 * geo.target_w * geo.target_h * static_cast<int64_t>(sizeof(float)) + crop_bytes +
                    plan.pixel_bytes;
  return plan;
}

Result<ProcessedImage> ProcessImage(const Image& image, const ImageProcessorOptions& opts) {
  if (image.width < 1 || image.height < 1 ||
      image.rgb.size() != static_cast<size_t>(image.width) * static_cast<size_t>(image.height) * 3) {
    return InvalidArgument("image of " + std::to_string(image.width) + "x" + std::to_string(image.height) +
                           " pixels has " + std::to_string(image.rgb.size()) +
                           " bytes of RGB data; expected width*height*3 and both sides >= 1");
  }
  PHI4MM_ASSIGN_OR_RETURN(const Geometry geo, ComputeGeometry(image.width, image.height, opts));
  const Grid g = geo.g;
  const int64_t S = geo.S, W = geo.W, H = geo.H;
  const int64_t target_w = geo.target_w, target_h = geo.target_h, new_w = geo.new_w, new_h = geo.new_h;

  // HD canvas: Pillow BILINEAR resize to new_w x new_h, then white padding right and bottom.
  const std::vector<uint8_t> resized = image_internal::ResizeBilinearPil(image.rgb, W, H, new_w, new_h);
  // Normalised canvas, CHW [3, target_h, target_w]. Reference: torchvision ToTensor (u8 -> float32
  // / 255) then Normalize((0.5,)*3, (0.5,)*3): (x - 0.5) / 0.5, all in float32.
  float lut[256];
  for (int v = 0; v < 256; ++v) lut[v] = (static_cast<float>(v) / 255.0f - 0.5f) / 0.5f;
  const size_t plane = static_cast<size_t>(target_h) * static_cast<size_t>(target_w);
  std::vector<float> canvas(3 * plane, lut[255]);
  for (int64_t y = 0; y < new_h; ++y) {
    for (int64_t x = 0; x < new_w; ++x) {
      const uint8_t* p = resized.data() + (y * new_w + x) * 3;
      const size_t o = static_cast<size_t>(y * target_w + x);
      canvas[o] = lut[p[0]];
      canvas[plane + o] = lut[p[1]];
      canvas[2 * plane + o] = lut[p[2]];
    }
  }

  ProcessedImage out;
  SetShapeAndMasks(geo, &out);
  const size_t crop_elems = 3 * static_cast<size_t>(S) * static_cast<size_t>(S);
  out.pixel_values.resize(static_cast<size_t>(out.num_crops) * crop_elems);

  // Global view: bicubic (align_corners=False, no antialias) of the normalised canvas to S x S.
  const std::vector<float> global = image_internal::ResizeBicubicTorch(canvas.data(), 3, target_h, target_w, S, S);
  std::copy(global.begin(), global.end(), out.pixel_values.begin());

  // HD crops: [3, gh, S, gw, S] -> [gh, gw, 3, S, S], crop index r*gw + c.
  for (int64_t r = 0; r < g.gh; ++r) {
    for (int64_t c = 0; c < g.gw; ++c) {
      float* dst = out.pixel_values.data() + static_cast<size_t>(1 + r * g.gw + c) * crop_elems;
      for (int64_t ch = 0; ch < 3; ++ch) {
        for (int64_t y = 0; y < S; ++y) {
          const float* src = canvas.data() + static_cast<size_t>(ch) * plane +
                             static_cast<size_t>((r * S + y) * target_w + c * S);
          std::copy(src, src + S, dst + (ch * S + y) * S);
        }
      }
    }
  }

  out.num_tokens = CountImageTokens(out);
  return out;
}

int64_t CountImageTokens(const ProcessedImage& image) {
  // Reference: num_img_tokens = 256 + 1 + sum(ds) + sum(ds[:, 0]) + 16 with ds the canvas mask
  // sampled at even rows and columns ([gh*ceil(m/2), gw*ceil(m/2)]); crop (r, c)'s mask is the
  // canvas mask's block (r, c). 256 and 16 are the global view's (m/2)^2 pooled tokens and m/2 row
  // separators for m = 32; written generically so that smaller geometries count what the vision
  // tower produces (ceil(m/2) per side after its 2x2 pool, which pads odd sides).
  const int64_t m = image.patches_per_side, S = image.crop_size;
  const int64_t gh = S > 0 ? image.hd_height / S : 0, gw = S > 0 ? image.hd_width / S : 0;
  const int64_t half = m / 2 + m % 2;
  const size_t mask_elems = static_cast<size_t>(m) * static_cast<size_t>(m);
  // Only the crops the mask holds (a short buffer is the vision tower's error to report).
  const int64_t held = mask_elems > 0 ? static_cast<int64_t>(image.attention_mask.size() / mask_elems) - 1 : 0;
  const int64_t crops = std::min(gh * gw, held);
  int64_t ds_sum = 0, ds_first_col = 0;
  for (int64_t crop = 0; crop < crops; ++crop) {
    const uint8_t* mask = image.attention_mask.data() + static_cast<size_t>(1 + crop) * mask_elems;
    for (int64_t y = 0; y < m; y += 2) {
      for (int64_t x = 0; x < m; x += 2) {
        const uint8_t v = mask[y * m + x];
        ds_sum += v;
        if (crop % gw == 0 && x == 0) ds_first_col += v;
      }
    }
  }
  return half * half + 1 + ds_sum + ds_first_col + half;
}

}  // namespace phi4mm
