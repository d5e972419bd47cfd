// The Phi-4-multimodal image processor (reference: Phi4MMImageProcessor / the transformers
// Phi4MultimodalImageProcessorFast of 4.5x, reference-spec §2): dynamic-HD crop-grid selection,
// Pillow-bilinear resize, white right/bottom padding, normalisation to [-1, 1], the bicubic global
// view, the per-crop patch attention mask, image_sizes, and the number of placeholder tokens.
#pragma once

#include <cstdint>
#include <vector>

#include "phi4mm/base/status.h"
#include "phi4mm/preprocess/image.h"

namespace phi4mm {

struct ImageProcessorOptions {
  int64_t dynamic_hd = 36;   // maximum number of HD crops (preprocessor_config.json)
  int64_t crop_size = 448;   // dyhd_base_resolution
  int64_t patch_size = 14;
};

struct ProcessedImage {
  int64_t num_crops = 0;              // 1 global view + HD crops
  int64_t crop_size = 0;
  int64_t patches_per_side = 0;       // crop_size / patch_size
  std::vector<float> pixel_values;    // [num_crops, 3, crop_size, crop_size], global view first
  std::vector<uint8_t> attention_mask;  // [num_crops, patches_per_side, patches_per_side]
  int64_t hd_height = 0, hd_width = 0;  // image_sizes: the padded HD canvas
  int64_t num_tokens = 0;             // placeholder tokens this image takes in the prompt
};

Result<ProcessedImage> ProcessImage(const Image& image, const ImageProcessorOptions& opts);

// What ProcessImage makes of a width x height image, known from the size alone (no pixel is
// touched): the crops, the placeholder tokens (exactly ProcessImage's num_tokens), the bytes of its
// result, and the most it holds at once while it runs (the decoded image included).
struct ImagePlan {
  int64_t num_crops = 0;
  int64_t num_tokens = 0;
  int64_t pixel_bytes = 0;  // pixel_values and attention_mask
  int64_t peak_bytes = 0;
};
Result<ImagePlan> PlanImage(int64_t width, int64_t height, const ImageProcessorOptions& opts);

// The placeholder tokens an image takes, from its geometry (hd_height/hd_width, crop_size,
// patches_per_side) and the HD crops' attention masks: what ProcessImage sets num_tokens to, and
// what a processor's tensors made elsewhere (ONNX Runtime GenAI's) imply.
int64_t CountImageTokens(const ProcessedImage& image);

}  // namespace phi4mm
