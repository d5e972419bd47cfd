// The `model` part of the four-model split: the Phi-4-mini decoder (reference:
// Phi4MultimodalModel.forward / Phi4MultimodalDecoderLayer / Phi4MultimodalAttention /
// Phi4MultimodalMLP, eager attention). RMSNorm, fused qkv and gate_up projections with
// per-modality LoRA, grouped-query attention with partial LongRoPE rotary, SwiGLU, and a tied
// lm_head. Weights are immutable and shared by every session; the KV cache is per session.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "phi4mm/base/tensor_tap.h"
#include "phi4mm/base/thread_pool.h"
#include "phi4mm/io/checkpoint.h"
#include "phi4mm/kernels/attention.h"
#include "phi4mm/models/embedding.h"
#include "phi4mm/models/lora_linear.h"
#include "phi4mm/models/rope.h"

namespace phi4mm {

struct DecoderLayerWeights {
  std::vector<float> input_norm;      // [hidden]
  std::vector<float> post_attn_norm;  // [hidden]
  LoraLinear qkv;                     // [(heads + 2*kv_heads) * head_dim, hidden]
  LoraLinear o;                       // [hidden, heads * head_dim]
  LoraLinear gate_up;                 // [2 * intermediate, hidden], gate rows first
  LoraLinear down;                    // [hidden, intermediate]
};

// Per-session key/value cache, rows appended per position: [layer][pos][kv_head][head_dim], as
// float32, IEEE half (rounded to nearest even when stored) or 8-bit (int8 per head row with a
// float scale, quantized when stored); see KvDType.
class KvCache {
 public:
  KvCache() = default;
  KvCache(int64_t layers, int64_t kv_heads, int64_t head_dim, KvDType dtype = KvDType::kF32);
  KvDType dtype() const { return dtype_; }
  int64_t length() const { return length_; }
  // Whether the cached positions were computed with the long rotary table.
  bool long_rope() const { return long_rope_; }
  void Clear();
  // Forgets positions >= n (they are recomputed or overwritten later).
  void Truncate(int64_t n);
  // Bytes allocated (capacity, not length).
  size_t bytes() const;
  int64_t row_floats() const { return kv_heads_ * head_dim_; }
  size_t row_bytes() const { return KvRowBytes(dtype_, kv_heads_, head_dim_); }

 private:
  friend class Decoder;
  void EnsureCapacity(int64_t positions);
  int64_t kv_heads_ = 0, head_dim_ = 0, length_ = 0, capacity_ = 0;
  bool long_rope_ = false;
  KvDType dtype_ = KvDType::kF32;
  std::vector<std::vector<uint8_t>> k_, v_;  // [layer] -> capacity * row_bytes()
};

class Decoder {
 public:
  // `embedding` supplies the tied lm_head when the checkpoint has no lm_head.weight. The linear
  // layers' base weights are converted to LinearFormat(quant), an untied lm_head to
  // EmbeddingFormat(quant); `pool` splits the conversion. Caches from NewCache() hold `kv_dtype`.
  static Result<std::shared_ptr<const Decoder>> Load(const Checkpoint& ckpt, const ModelConfig& cfg,
                                                     std::shared_ptr<const TokenEmbedding> embedding,
                                                     QuantMode quant = QuantMode::kNone, ThreadPool* pool = nullptr,
                                                     KvDType kv_dtype = KvDType::kF32);

  const TextConfig& config() const { return cfg_; }
  const RotaryTables& rotary() const { return rope_; }
  KvDType kv_dtype() const { return kv_dtype_; }
  KvCache NewCache() const {
    return KvCache(cfg_.num_hidden_layers, cfg_.num_key_value_heads, cfg_.head_dim, kv_dtype_);
  }
  // KV-cache bytes one position takes (all layers, K and V).
  int64_t kv_bytes_per_token() const {
    return 2 * cfg_.num_hidden_layers *
           static_cast<int64_t>(KvRowBytes(kv_dtype_, cfg_.num_key_value_heads, cfg_.head_dim));
  }
  const WeightMatrix& lm_head() const;
  const std::vector<DecoderLayerWeights>& layers() const { return layers_; }
  size_t weight_bytes(bool include_lora) const;

  // Runs S new positions whose input embeddings are `embeds` [S, hidden], appended after the
  // cache's current length, with rotary table `long_rope` and LoRA `mode`. Writes the final-norm
  // hidden state of the LAST position to `last_hidden` [hidden]. Taps (when `tap` is set):
  // "<prefix>embeds", "<prefix>layer.<i>" [S, hidden] (each layer's output), "<prefix>norm".
  Status Forward(const float* embeds, int64_t S, LoraMode mode, bool long_rope, KvCache* cache,
                 ThreadPool* pool, TensorTap* tap, const std::string& tap_prefix, float* last_hidden) const;
  // logits[vocab] = lm_head · hidden.
  void Logits(const float* hidden, float* logits, ThreadPool* pool) const;

 private:
  Decoder(const TextConfig& cfg) : cfg_(cfg), rope_(cfg) {}
  TextConfig cfg_;
  RotaryTables rope_;
  KvDType kv_dtype_ = KvDType::kF32;
  std::vector<float> final_norm_;
  std::vector<DecoderLayerWeights> layers_;
  std::shared_ptr<const TokenEmbedding> embedding_;
  WeightMatrix untied_lm_head_;
};

}  // namespace phi4mm
