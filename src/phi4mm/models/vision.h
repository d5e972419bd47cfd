// The `vision` part of the four-model split (reference: Phi4MMImageEmbedding /
// Phi4MultimodalImageEmbedding, reference-spec §3): SigLIP-NaViT patch embedding with bucketed
// position ids under the patch mask, the encoder layers up to hidden state `feature_layer`,
// bidirectional attention with padded patches masked, the 2x2 average pool, the glb_GN / sub_GN
// separators in sub_glb order, and the projection MLP to the decoder's hidden size.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "phi4mm/base/tensor_tap.h"
#include "phi4mm/base/thread_pool.h"
#include "phi4mm/io/checkpoint.h"
#include "phi4mm/kernels/weight_matrix.h"
#include "phi4mm/preprocess/image_processor.h"

namespace phi4mm {

class VisionModel;

// A batch of crops inside the encoder: the hidden states after `layer` encoder layers, with the
// key mask of its padded patches. The unit the encoder runs in (EncodeCrops, or a job's layer
// slices).
struct VisionCropBatch {
  int64_t crops = 0;
  int64_t layer = 0;            // encoder layers run so far
  std::vector<float> h;         // [crops, P*P, hidden]
  std::vector<uint8_t> valid;   // [crops, P*P]: 1 where a patch is inside its crop's valid area
  bool any_masked = false;      // some patch of the batch is padding (the mask applies)
};

// One image's encoding, resumable a few crops or a few encoder layers at a time (the engine
// interleaves it with decoder steps so running answers keep flowing, and a big image's crops go
// through the encoder in bounded groups). Holds the image; the model must outlive the job.
class VisionEncodeJob {
 public:
  int64_t crops() const { return crops_; }
  int64_t crops_done() const { return next_; }
  bool encoded() const { return next_ >= crops_; }
  // Runs the next min(n, remaining) crops through the encoder and the 2x2 pool.
  Status Step(int64_t n, ThreadPool* pool);
  // Runs up to `layers` encoder layers of the next crop, one crop at a time: its patch embedding
  // before its first layer, its 2x2 pool after its last. The features equal Step's bit for bit.
  Status StepLayers(int64_t layers, ThreadPool* pool);
  // Once every crop is encoded: separators and projection, [num_tokens, text hidden_size].
  Result<std::vector<float>> Finish(ThreadPool* pool);

 private:
  friend class VisionModel;
  // The 2x2 pool of `b` finished crops' features into pooled_, from crop next_ on.
  void PoolCrops(const std::vector<float>& feat, int64_t b, ThreadPool* pool);
  const VisionModel* model_ = nullptr;
  std::shared_ptr<const ProcessedImage> image_;
  int64_t gh_ = 0, gw_ = 0, crops_ = 0, next_ = 0;
  std::vector<float> pooled_;             // [crops, F*F, D]
  std::optional<VisionCropBatch> crop_;   // the crop StepLayers has in flight
  TensorTap* tap_ = nullptr;
  std::string tap_prefix_;
};

class VisionModel {
 public:
  // `quant` picks the encoder layers' linear format (EncoderLinearFormat); the patch embedding,
  // positions and projection MLP keep the stored format. Conversion rows are split over `pool`.
  static Result<std::shared_ptr<const VisionModel>> Load(const Checkpoint& ckpt, const ModelConfig& cfg,
                                                         QuantMode quant = QuantMode::kNone,
                                                         ThreadPool* pool = nullptr);
  // The format of the encoder layers' q/k/v/out/fc1/fc2 under `quant` (the manifest's policy,
  // FormatFor kEncoderLinear): as stored for kNone, bf16
  // for kBF16, Q8_0 for kQ8 and kQ4 (the encoder gets no 4-bit format: int8 keeps its features
  // close to float, see tests/vision_quant_test.cc, and its GEMMs are compute-bound, not read-bound).
  static std::optional<WeightFormat> EncoderLinearFormat(QuantMode quant);
  // The format the encoder layers' linears were loaded in (what their GEMMs run on; benchmarks
  // pick the compute ceiling from it).
  WeightFormat linear_format() const;
  // Features for the image's placeholder tokens: [image.num_tokens, text hidden_size]. All crops of
  // the image go through the encoder in groups of 4 (one batch with a tap). Taps use `tap_prefix`
  // (e.g. "image.0.").
  Result<std::vector<float>> Encode(const ProcessedImage& image, ThreadPool* pool, TensorTap* tap,
                                    const std::string& tap_prefix) const;
  // Checks the processed image and starts a resumable encoding of it (Encode is StartEncode, one
  // Step over every crop, then Finish).
  Result<VisionEncodeJob> StartEncode(std::shared_ptr<const ProcessedImage> image, TensorTap* tap = nullptr,
                                      const std::string& tap_prefix = "") const;

 private:
  friend class VisionEncodeJob;
  struct Linear {
    WeightMatrix w;          // [out, in]
    std::vector<float> b;    // [out]
  };
  struct Layer {
    std::vector<float> ln1_w, ln1_b, ln2_w, ln2_b;  // [hidden]
    Linear q, k, v, out, fc1, fc2;
  };
  VisionModel() = default;
  void Apply(const Linear& l, const float* x, int64_t n, float* y, ThreadPool* pool) const;
  // The encoder up to hidden state `feature_layer` for a batch of crops: pixels [B, 3, S, S],
  // mask [B, P, P] -> features [B, P*P, hidden]. It is EmbedCrops, then RunLayers over every layer.
  Result<std::vector<float>> EncodeCrops(const float* pixels, const uint8_t* mask, int64_t B, ThreadPool* pool,
                                         TensorTap* tap, const std::string& tap_prefix) const;
  // Patch embedding and NaViT positions of B crops: a batch at layer 0.
  Result<VisionCropBatch> EmbedCrops(const float* pixels, const uint8_t* mask, int64_t B, ThreadPool* pool,
                                     TensorTap* tap, const std::string& tap_prefix) const;
  // The next min(count, remaining) encoder layers of a batch.
  void RunLayers(VisionCropBatch& cb, int64_t count, ThreadPool* pool, TensorTap* tap,
                 const std::string& tap_prefix) const;

  VisionConfig cfg_;
  int64_t text_hidden_ = 0;
  int64_t patches_per_side_ = 0;
  int64_t layers_to_run_ = 0;  // encoder layers that feed hidden_states[feature_layer]
  Linear patch_;               // conv 14x14 stride 14 as [hidden, 3*14*14]
  WeightMatrix position_;      // [patches_per_side^2, hidden]
  std::vector<Layer> layers_;
  std::vector<float> glb_gn_, sub_gn_;  // [hidden] each
  Linear proj_up_, proj_down_;          // hidden -> text hidden -> text hidden
};

}  // namespace phi4mm
