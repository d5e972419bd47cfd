// The `speech` part of the four-model split (reference: Phi4MMAudioEmbedding /
// Phi4MultimodalAudioEmbedding and the Conformer encoder, reference-spec §5): mean/invstd
// normalisation, NeMo convolutional subsampling, the Conformer blocks with T5 relative bias, long
// audio split into chunks as the reference does, and one of the two projection MLPs — the speech
// projection for audio alone, the vision-speech projection when the request also has an image.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "phi4mm/base/tensor_tap.h"
#include "phi4mm/base/thread_pool.h"
#include "phi4mm/io/checkpoint.h"
#include "phi4mm/preprocess/audio_features.h"

namespace phi4mm {

class SpeechModel {
 public:
  static Result<std::shared_ptr<const SpeechModel>> Load(const Checkpoint& ckpt, const ModelConfig& cfg);
  // Features for the clip's placeholder tokens: [features.num_tokens, text hidden_size].
  // `with_image`: the request also has an image (vision-speech projection).
  Result<std::vector<float>> Encode(const AudioFeatures& features, bool with_image, ThreadPool* pool,
                                    TensorTap* tap, const std::string& tap_prefix) const;

 private:
  struct Weights;  // defined in speech.cc
  SpeechModel() = default;
  std::shared_ptr<const Weights> w_;
};

}  // namespace phi4mm
