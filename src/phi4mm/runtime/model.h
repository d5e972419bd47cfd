// A loaded Phi-4-multimodal model: configuration, tokenizer, and the immutable weights of the
// four parts (`embedding`, `model`, and — loaded on first use, so a text-only process never
// touches their pages — `vision` and `speech`), memory-mapped from the Hugging Face checkpoint
// folder. Load once, share across threads and sessions.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <mutex>
#include <string>

#include "phi4mm/base/thread_pool.h"
#include "phi4mm/io/checkpoint.h"
#include "phi4mm/io/model_config.h"
#include "phi4mm/models/decoder.h"
#include "phi4mm/models/embedding.h"
#include "phi4mm/grammar/grammar.h"
#include "phi4mm/models/speech.h"
#include "phi4mm/models/vision.h"
#include "phi4mm/tokenizer/tokenizer.h"

namespace phi4mm {

struct LoadOptions {
  int num_threads = 0;  // 0 = one per core
  // Weight formats (kNone: as stored): the decoder, its LoRA adapters and the embedding / lm_head,
  // the vision encoder's layers and the speech encoder's linears, by the manifest's policy
  // (models/tensor_manifest.h, FormatFor). A pre-quantized folder loads as stored in its own mode.
  QuantMode quant = QuantMode::kNone;
  // Element type of the sessions' KV caches. Unset: float32 when the weights run as stored (the
  // reference-exact mode; f16 moves the tiny fixture's logits by ~1.6e-3 relative, past the 1e-4
  // parity tolerance), f16 under bf16, q8 and q4 and for a pre-quantized folder, where it halves the
  // cache and the bytes decode reads at a cost far below the weights' own rounding.
  std::optional<KvDType> kv_dtype = std::nullopt;
  // When set, every weight converted at load (also by vision() / speech() later) is recorded here
  // (`phi4mm quantize`, io/prequantized.h); must outlive the model's loading. Such a model keeps its
  // weights in the file layout that gets written, not in the active kernel table's compute layout
  // (WeightLayout), so it runs, but the avx512 table repacks its Q8_0 matrices on every product:
  // load the written folder to run it.
  ConversionLog* conversion_log = nullptr;
};

// Parameter counts and sizes for `phi4mm info`.
struct ModelInfo {
  std::string layout;
  std::string dir;
  size_t num_files = 0;
  int64_t params_embedding = 0;
  int64_t params_decoder = 0;
  int64_t params_vision_lora = 0;
  int64_t params_speech_lora = 0;
  int64_t params_vision = 0;
  int64_t params_speech = 0;
  int64_t params_other = 0;
  std::map<std::string, int64_t> params_by_dtype;
  int64_t context_length = 0;
  std::string kv_dtype;            // element type of the KV cache ("f32", "f16")
  int64_t kv_bytes_per_token = 0;  // at the cache's element size
};

class Model {
 public:
  static Result<std::shared_ptr<const Model>> Load(const std::string& dir, const LoadOptions& opts = {});

  const ModelConfig& config() const { return config_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const TokenEmbedding& embedding() const { return *embedding_; }
  const Decoder& decoder() const { return *decoder_; }
  ThreadPool* pool() const { return pool_.get(); }
  // The opened checkpoint (canonical tensor names), for loading further parts.
  const Checkpoint& checkpoint() const { return *checkpoint_; }
  int64_t context_length() const { return config_.text.max_position_embeddings; }
  ModelInfo Info() const;
  // The vision / speech parts, loaded (and shape-checked) on first use; thread-safe.
  Result<const VisionModel*> vision() const;
  Result<const SpeechModel*> speech() const;
  // The grammar compiler for this model's vocabulary (structured output), created on first use
  // (about a second: the vocabulary is indexed); thread-safe, with its compiled-grammar cache.
  Result<grammar::Compiler*> grammar() const;

 private:
  Model() = default;
  ModelConfig config_;
  std::unique_ptr<Checkpoint> checkpoint_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::shared_ptr<const TokenEmbedding> embedding_;
  std::shared_ptr<const Decoder> decoder_;
  std::unique_ptr<ThreadPool> pool_;
  QuantMode quant_ = QuantMode::kNone;
  mutable std::mutex parts_mu_;
  mutable std::shared_ptr<const VisionModel> vision_;
  mutable std::shared_ptr<const SpeechModel> speech_;
  mutable std::shared_ptr<grammar::Compiler> grammar_;
};

}  // namespace phi4mm
