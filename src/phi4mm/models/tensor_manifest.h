// The tensor manifest: every tensor of a Phi-4-multimodal checkpoint, derived from its
// configuration alone, with the part of the four-model split it belongs to (embedding, text
// decoder, vision, speech), its role, its exact shape, its name in both checkpoint layouts
// (Microsoft's original and the native transformers port with PEFT adapter folders), and the
// weight format each `--quant` mode stores it in. The loaders, `phi4mm info`, `phi4mm quantize`
// and the ONNX exporter read names and the quantization policy from here, so they live in one
// place. Canonical names are the ones io/checkpoint.h exposes.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "phi4mm/io/model_config.h"
#include "phi4mm/kernels/weight_matrix.h"
#include "phi4mm/models/lora_mode.h"

namespace phi4mm {

enum class ModelPart { kEmbedding, kDecoder, kVision, kSpeech };
const char* ModelPartName(ModelPart p);

enum class TensorRole {
  kEmbeddingTable,  // model.embed_tokens.weight (also the tied lm_head)
  kLmHead,          // an untied lm_head.weight
  kDecoderLinear,   // the base weight of a LoRA'd decoder projection (qkv, o, gate_up, down)
  kLoraA,           // a decoder LoRA adapter's A [r, in]
  kLoraB,           // a decoder LoRA adapter's B [out, r]
  kEncoderLinear,   // a vision encoder layer's q/k/v/out/fc1/fc2 weight, or a speech encoder linear
                    // (subsampling pointwise convs and output, Conformer feed-forward, attention and
                    // pointwise-conv weights)
  kParameter,       // every other tensor the engine reads (norms, biases, convolutions, projections)
  kUnused,          // stored in the checkpoint but not read (SigLIP head, post_layernorm, layers past feature_layer)
};
const char* TensorRoleName(TensorRole r);

struct TensorSpec {
  std::string name;  // canonical
  ModelPart part = ModelPart::kDecoder;
  TensorRole role = TensorRole::kParameter;
  std::vector<int64_t> shape;
  LoraMode adapter = LoraMode::kNone;  // the adapter of a kLoraA / kLoraB tensor
  int64_t numel() const;
};

// Where a tensor lives in one checkpoint layout: the file relative to the checkpoint folder
// ("" = the main safetensors set, sharded or not; "vision-lora/adapter_model.safetensors" for a
// native adapter) and the key stored there.
struct StoredName {
  std::string file;
  std::string key;
};

class TensorManifest {
 public:
  // Every tensor `cfg` implies: the decoder (with the LoRA adapters the config declares), the
  // embedding table, an lm_head only when tie_word_embeddings is false, the vision tower with its
  // unused SigLIP head, and the speech Conformer with both projections.
  static TensorManifest ForConfig(const ModelConfig& cfg);

  const std::vector<TensorSpec>& tensors() const { return tensors_; }
  // nullptr when `name` is not a tensor of this model.
  const TensorSpec* Find(const std::string& canonical_name) const;
  // The tensors of one part, in manifest order.
  std::vector<const TensorSpec*> Part(ModelPart part) const;

 private:
  void Add(TensorSpec spec);
  std::vector<TensorSpec> tensors_;
  std::map<std::string, size_t> index_;
};

// The name and file of `spec` in `layout` (the inverse of Checkpoint's canonicalisation).
StoredName StoredNameIn(const TensorSpec& spec, CheckpointLayout layout);

// The quantization policy: the format `quant` converts a tensor of `role` to at load and in
// `phi4mm quantize` (std::nullopt = kept as stored). Decoder linears take LinearFormat(quant),
// the embedding / lm_head EmbeddingFormat(quant); LoRA adapters bf16 under bf16 and q8, Q4_K under
// q4 (a batch mixing the three modes reads both adapters every step: 4 bits keep that near a
// text-only step, docs/benchmarks.md; a rank that is not a multiple of 256 pads its B rows' last
// block) and Q8_0 under q4m (docs/quant-quality.md measures both); vision encoder layers
// bf16 under bf16 and Q8_0 under q8 and q4 (compute-bound GEMMs; tests/vision_quant_test.cc), and
// the speech encoder's linears the same (tests/speech_quant_test.cc);
// everything else as stored.
std::optional<WeightFormat> FormatFor(TensorRole role, QuantMode quant);

// The four LoRA'd projections of a decoder layer.
enum class DecoderProjection { kQkv, kO, kGateUp, kDown };
// The format of one decoder projection's base weight: FormatFor(kDecoderLinear, quant), except
// under q4m, which keeps at Q8_0 the projections where 4-bit error costs most, where llama.cpp's
// Q4_K_M spends 5 and 6 bits: qkv in every layer and down in the MoreBitsLayer layers
// (docs/quant-quality.md measures what that buys).
std::optional<WeightFormat> DecoderLinearFormat(QuantMode quant, DecoderProjection proj, int64_t layer,
                                                int64_t num_layers);
// The layers that get more bits in q4m: the first and the last eighth and every third layer in
// between (layers 0-3, 6, 9, ..., 27 and 28-31 of 32; 2 and 3 of 4). This is llama.cpp's rule for
// Q4_K_M's ffn_down, so both mixtures touch the same layers.
bool MoreBitsLayer(int64_t layer, int64_t num_layers);

// Canonical names of the decoder, as the loaders and the exporter build them.
namespace names {
std::string DecoderLayer(int64_t layer);  // "model.layers.<i>."
// "<module>.lora_A.<adapter>.weight" / "<module>.lora_B.<adapter>.weight"
std::string LoraA(const std::string& module, LoraMode adapter);
std::string LoraB(const std::string& module, LoraMode adapter);
inline constexpr const char* kEmbedTokens = "model.embed_tokens.weight";
inline constexpr const char* kFinalNorm = "model.norm.weight";
inline constexpr const char* kLmHead = "lm_head.weight";
inline constexpr const char* kVisionPrefix = "model.embed_tokens_extend.image_embed.";
inline constexpr const char* kSpeechPrefix = "model.embed_tokens_extend.audio_embed.";
}  // namespace names

}  // namespace phi4mm
