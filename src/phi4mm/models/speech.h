// The `speech` part of the four-model split (reference: Phi4MMAudioEmbedding /
// Phi4MultimodalAudioEmbedding and the Conformer encoder, reference-spec §5): mean/invstd
// normalisation, NeMo convolutional subsampling, the Conformer blocks with T5 relative bias, long
// audio split into chunks as the reference does, and one of the two projection MLPs — the speech
// projection for audio alone, the vision-speech projection when the request also has an image.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "phi4mm/base/tensor_tap.h"
#include "phi4mm/base/thread_pool.h"
#include "phi4mm/io/checkpoint.h"
#include "phi4mm/kernels/weight_matrix.h"
#include "phi4mm/preprocess/audio_features.h"

namespace phi4mm {

class SpeechModel;

// One clip's encoding, resumable one Conformer block at a time (the engine interleaves it with
// decoder steps). Start runs the normalisation and the convolutional subsampling; each Step one
// block over every 500-frame chunk; Finish the projection. The model must outlive the job.
class SpeechEncodeJob {
 public:
  int64_t blocks() const;
  int64_t blocks_done() const;
  bool encoded() const { return blocks_done() >= blocks(); }
  Status Step(int64_t n_blocks, ThreadPool* pool);
  // [num_tokens, text hidden_size] once every block ran.
  Result<std::vector<float>> Finish(ThreadPool* pool);

 private:
  friend class SpeechModel;
  struct State;  // defined in speech.cc
  std::shared_ptr<State> s_;
};

class SpeechModel {
 public:
  // `quant` picks the format of the encoder's linears (EncoderLinearFormat: the NeMo subsampling's
  // pointwise convolutions and output linear, and every Conformer block's feed-forward, attention and
  // pointwise-convolution matrices); the depthwise convolutions, norms, biases and the two audio
  // projections keep the stored format. Conversion rows are split over `pool`.
  static Result<std::shared_ptr<const SpeechModel>> Load(const Checkpoint& ckpt, const ModelConfig& cfg,
                                                         QuantMode quant = QuantMode::kNone,
                                                         ThreadPool* pool = nullptr);
  // The format of those linears under `quant` (the manifest's policy, FormatFor kEncoderLinear, as
  // for the vision encoder): as stored for kNone, bf16 for kBF16, Q8_0 for kQ8, kQ4 and kQ4M (their
  // GEMMs are compute-bound; tests/speech_quant_test.cc bounds what int8 costs the features).
  static std::optional<WeightFormat> EncoderLinearFormat(QuantMode quant);
  // The format the Conformer blocks' linears were loaded in (what their GEMMs run on; benchmarks
  // pick the compute ceiling from it).
  WeightFormat linear_format() const;
  // Features for the clip's placeholder tokens: [features.num_tokens, text hidden_size].
  // `with_image`: the request also has an image (vision-speech projection).
  Result<std::vector<float>> Encode(const AudioFeatures& features, bool with_image, ThreadPool* pool,
                                    TensorTap* tap, const std::string& tap_prefix) const;
  // Checks the features and runs the encoder's front (Encode = StartEncode, Step over every block,
  // Finish).
  Result<SpeechEncodeJob> StartEncode(const AudioFeatures& features, bool with_image, ThreadPool* pool,
                                      TensorTap* tap = nullptr, const std::string& tap_prefix = "") const;

 private:
  friend class SpeechEncodeJob;
  struct Weights;  // defined in speech.cc
  SpeechModel() = default;
  std::shared_ptr<const Weights> w_;
};

}  // namespace phi4mm
