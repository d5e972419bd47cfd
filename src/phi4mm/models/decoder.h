// The `model` part of the four-model split: the Phi-4-mini decoder (reference:
// Phi4MultimodalModel.forward / Phi4MultimodalDecoderLayer / Phi4MultimodalAttention /
// Phi4MultimodalMLP, eager attention). RMSNorm, fused qkv and gate_up projections with
// per-modality LoRA, grouped-query attention with partial LongRoPE rotary, SwiGLU, and a tied
// lm_head. Weights are immutable and shared by every session; the KV cache is per session.
#pragma once

#include <functional>
#include <memory>
#include <span>
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

// Per-session key/value cache, head-major: [layer][kv_head][capacity positions][head_dim], so a
// decode step streams each head's cached rows contiguously (position-major rows left a head's
// 256 bytes in every 2 KB row at Phi-4-mini's shape, and decode attention read the cache at a
// third of the speed). Elements are float32, IEEE half (rounded to nearest even when stored) or
// 8-bit (int8 per head row followed by its float scale, quantized when stored); see KvDType.
class KvCache {
 public:
  KvCache() = default;
  KvCache(int64_t layers, int64_t kv_heads, int64_t head_dim, KvDType dtype = KvDType::kF32);
  KvDType dtype() const { return dtype_; }
  int64_t length() const { return length_; }
  // Whether the cached positions were computed with the long rotary table.
  bool long_rope() const { return long_rope_; }
  void Clear();
  // Allocates room for exactly `positions` positions once (a scheduler's admission reserves a
  // request's whole worst case up front); later growth past it is an error, not a reallocation.
  void Reserve(int64_t positions);
  int64_t capacity() const { return capacity_; }
  int64_t layers() const { return static_cast<int64_t>(k_.size()); }
  // An empty cache of the same shape and element type.
  KvCache EmptyLike() const { return KvCache(layers(), kv_heads_, head_dim_, dtype_); }
  // Copies positions [0, n) of `src` (same shape and dtype, n <= both capacities) and its rotary
  // table flag; used to reuse a cached prefix.
  Status CopyPrefixFrom(const KvCache& src, int64_t n);
  // Forgets positions >= n (they are recomputed or overwritten later).
  void Truncate(int64_t n);
  // Grows the room to exactly `positions` (a scheduler growing a reservation block by block),
  // keeping what is cached; never shrinks.
  void Grow(int64_t positions);
  // The cached positions as byte runs, one per layer, K or V, and KV head, in that order (what a
  // scheduler writes out to swap a sequence out of memory).
  void ForEachRun(const std::function<void(const uint8_t* data, size_t bytes)>& f) const;
  // Refills an empty cache with `length` positions from runs in ForEachRun's order, with room for
  // `capacity` positions; `read` fills each run and returns false on failure (then the cache is
  // left empty).
  bool FillRuns(int64_t length, int64_t capacity, bool long_rope, const std::function<bool(uint8_t* data, size_t bytes)>& read);
  // Bytes allocated (capacity, not length).
  size_t bytes() const;
  int64_t row_floats() const { return kv_heads_ * head_dim_; }
  size_t row_bytes() const { return KvRowBytes(dtype_, kv_heads_, head_dim_); }
  // Bytes of one head's part of one position (the stride between positions within a head).
  size_t head_bytes() const { return KvHeadBytes(dtype_, head_dim_); }

 private:
  friend class Decoder;
  Status EnsureCapacity(int64_t positions);
  int64_t kv_heads_ = 0, head_dim_ = 0, length_ = 0, capacity_ = 0;
  bool long_rope_ = false, fixed_ = false;
  KvDType dtype_ = KvDType::kF32;
  std::vector<std::vector<uint8_t>> k_, v_;  // [layer] -> kv_heads planes of capacity * head_bytes()
};

// One sequence's rows in a batched decoder step: a decode row (n = 1) or a chunk of its prompt.
struct SeqChunk {
  const float* embeds = nullptr;  // [n, hidden] input embeddings
  int64_t n = 0;
  KvCache* cache = nullptr;       // the rows go to positions cache->length() ..+n
  LoraMode mode = LoraMode::kNone;
  bool long_rope = false;         // rotary table of the whole sequence (must match a non-empty cache)
  float* last_hidden = nullptr;   // [hidden] final-norm hidden state of the last row; may be null
  float* all_hidden = nullptr;    // [n, hidden] final-norm hidden states of every row (perplexity); may be null
};

// Wall time of a decoder step's parts in seconds, summed over the layers (one clock read per part
// and layer, only when DecoderScratch::times is set). Each projection includes its LoRA passes.
struct DecoderStepTimes {
  double qkv = 0;         // input RMSNorm + qkv projection
  double attention = 0;   // rotary, KV append, causal attention
  double o = 0;           // o projection + residual add
  double gate_up = 0;     // post-attention RMSNorm + gate_up projection
  double activation = 0;  // SwiGLU
  double down = 0;        // down projection + residual add
  double sum() const { return qkv + attention + o + gate_up + activation + down; }
  DecoderStepTimes& operator+=(const DecoderStepTimes& t) {
    qkv += t.qkv;
    attention += t.attention;
    o += t.o;
    gate_up += t.gate_up;
    activation += t.activation;
    down += t.down;
    return *this;
  }
};

// Activations of a step, owned by the caller (a session or the scheduler) and reused, so a warm
// step allocates nothing; they grow to the largest step's row count (bounded by the prefill chunk).
struct DecoderScratch {
  std::vector<float> x, h, qkv, q, attn, tmp, gu, act, kbuf, cos, sin, lora;
  std::vector<size_t> order;
  std::vector<int64_t> row0, past;  // per chunk: its first row in the step, its cache length before
  int64_t rows = 0;                 // rows of the step
  std::vector<LoraSegment> segments;
  std::vector<AttentionJob> attention_jobs;  // one per sequence of the step, for each layer
  DecoderStepTimes* times = nullptr;  // when set, Step adds the wall time of its parts to it
};

class Decoder {
 public:
  // `embedding` supplies the tied lm_head when the checkpoint has no lm_head.weight. The linear
  // layers' weights are converted as the manifest's policy gives `quant` (models/tensor_manifest.h:
  // DecoderLinearFormat per projection and layer, kLoraA for the adapters), an untied lm_head as
  // kLmHead; `pool` splits the conversion. Caches from NewCache() hold `kv_dtype`.
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
  // The batched step: one pass over the rows of every chunk (each from a different sequence, with
  // its own cache, positions, rotary table and LoRA mode). The linear layers run once over all
  // rows, ordered by LoRA mode so each adapter runs on its own rows only (LoraLinear segments);
  // rotary, the KV writes and attention are per chunk. A row's result does not depend on the
  // other chunks. Taps (as Forward's) are written only for a single chunk.
  Status Step(std::span<const SeqChunk> chunks, ThreadPool* pool, DecoderScratch* scratch,
              TensorTap* tap = nullptr, const std::string& tap_prefix = "") const;
  // logits[n, vocab] = lm_head · hidden[n, hidden] (one pass over the head for all rows).
  void LogitsRows(const float* hidden, int64_t n, float* logits, ThreadPool* pool) const;

 private:
  class StepClock;
  Decoder(const TextConfig& cfg) : cfg_(cfg), rope_(cfg) {}
  // Step = PlanStep (validate, order the rows by LoRA mode, lay out the scratch, inputs and rotary
  // tables), one Layer per decoder layer, then the final norm of the rows asked for.
  Status PlanStep(std::span<const SeqChunk> chunks, DecoderScratch* sc) const;
  void Layer(size_t li, std::span<const SeqChunk> chunks, ThreadPool* pool, DecoderScratch* sc, StepClock& clock) const;
  TextConfig cfg_;
  RotaryTables rope_;
  KvDType kv_dtype_ = KvDType::kF32;
  std::vector<float> final_norm_;
  std::vector<DecoderLayerWeights> layers_;
  std::shared_ptr<const TokenEmbedding> embedding_;
  WeightMatrix untied_lm_head_;
};

}  // namespace phi4mm
