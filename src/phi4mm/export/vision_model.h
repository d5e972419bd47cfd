// The vision model of the package, phi-4-mm-vision.onnx (VisionModel::Encode, models/vision.h):
// per image (a Loop), the SigLIP-NaViT encoder over the image's 1 + h·w crops with bucketed
// position ids and padded patches masked, the 2x2 average pool, the sub_glb HD layout with the
// learned separators, and the projection MLP; images' tokens concatenated into
// image_features [Σ num_image_tokens, text hidden].
#pragma once

#include <string>

#include "phi4mm/export/export_common.h"
#include "phi4mm/io/model_config.h"

namespace phi4mm::exporter {

// Writes `out_dir/phi-4-mm-vision.onnx` (+ .data); returns the external data bytes.
Result<uint64_t> WriteVisionModel(const Checkpoint& ckpt, const ModelConfig& cfg, const std::string& out_dir,
                                  const ExportOptions& opts);

}  // namespace phi4mm::exporter
