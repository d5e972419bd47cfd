// The `vision` part of the four-model split (reference: Phi4MMImageEmbedding /
// Phi4MultimodalImageEmbedding, reference-spec §3): SigLIP-NaViT patch embedding with bucketed
// position ids under the patch mask, the encoder layers up to hidden state `feature_layer`,
// bidirectional attention with padded patches masked, the 2x2 average pool, the glb_GN / sub_GN
// separators in sub_glb order, and the projection MLP to the decoder's hidden size.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "phi4mm/base/tensor_tap.h"
#include "phi4mm/base/thread_pool.h"
#include "phi4mm/io/checkpoint.h"
#include "phi4mm/preprocess/image_processor.h"

namespace phi4mm {

class VisionModel {
 public:
  static Result<std::shared_ptr<const VisionModel>> Load(const Checkpoint& ckpt, const ModelConfig& cfg);
  // Features for the image's placeholder tokens: [image.num_tokens, text hidden_size]. All crops of
  // the image go through the encoder as one batch. Taps use `tap_prefix` (e.g. "image.0.").
  Result<std::vector<float>> Encode(const ProcessedImage& image, ThreadPool* pool, TensorTap* tap,
                                    const std::string& tap_prefix) const;
};

}  // namespace phi4mm
