// A Session is one conversation with a shared Model: it owns the token sequence, the KV cache and
// the per-request LoRA mode, and generates answers (greedy or sampled) with streaming, stop ids
// and stop strings. Invariants kept here, as the reference does them:
//  * the LoRA mode applies to the whole sequence: a request in another mode recomputes the cache;
//  * the rotary table is chosen by the total length; when a sequence first passes
//    original_max_position_embeddings the cache is dropped and recomputed with the long factors
//    (HF Phi4MultimodalForCausalLM.prepare_inputs_for_generation).
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "phi4mm/base/tensor_tap.h"
#include "phi4mm/models/lora_mode.h"
#include "phi4mm/runtime/media_rows.h"
#include "phi4mm/runtime/model.h"
#include "phi4mm/runtime/output_constraint.h"
#include "phi4mm/runtime/sampler.h"
#include "phi4mm/runtime/speculative.h"

namespace phi4mm {

enum class FinishReason { kEos, kStopString, kMaxTokens, kContextFull, kCancelled, kDeadline };
const char* FinishReasonName(FinishReason r);

struct GenerateOptions {
  int64_t max_new_tokens = 512;
  SamplingOptions sampling;
  std::vector<std::string> stop_strings;  // generation ends before the first occurrence
  std::vector<int32_t> stop_ids;          // empty = generation_config.json's eos ids
  OutputConstraint constraint;            // the shape the answer must take (none: free text)
  SpeculativeOptions speculative;         // drafts verified several tokens per step (speculative.h)
  // `vocab_size` > 0 also checks the logit-bias ids against the vocabulary.
  Status Validate(int64_t vocab_size = 0) const;
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated ids, including a final stop id
  std::string text;             // decoded answer (special tokens skipped, cut at a stop string)
  FinishReason finish = FinishReason::kEos;
  int64_t prompt_tokens = 0;    // tokens processed for the prompt of this request
  double prefill_seconds = 0, decode_seconds = 0;
  int64_t decode_steps = 0;
  // Per generated token when sampling.logprobs or top_logprobs asks for them (Sampler::last_logprobs).
  std::vector<TokenLogprobs> logprobs;
  // With an output constraint: the time its masks and token checks took (the grammar's cost).
  double constraint_seconds = 0;
  // With speculation: ids drafted and verified, and how many of them the answer took.
  int64_t draft_tokens = 0, accepted_draft_tokens = 0;
};

// Image and audio features for the placeholder tokens of a prompt: row k of `image` [n, hidden]
// replaces the k-th image placeholder (200010) of the prompt, row k of `audio` the k-th audio
// placeholder (200011). Produced by the vision and speech parts.
struct MediaFeatures {
  std::vector<float> image;
  std::vector<float> audio;
};

// Receives answer text as it becomes final; return false to stop generating.
using StreamCallback = std::function<bool(std::string_view text)>;

class Session {
 public:
  explicit Session(std::shared_ptr<const Model> model);

  // Appends `ids` to the sequence and runs every not-yet-processed position in `mode`; afterwards
  // logits() predicts the next token. Fails without changing the session when the sequence would
  // not fit the context or an id is outside the vocabulary.
  // Placeholder ids in `ids` take their rows from `media` (required when there are any).
  Status Append(std::span<const int32_t> ids, LoraMode mode, const MediaFeatures* media = nullptr);
  // Appends the prompt ids (and their media features), then generates.
  Result<GenerateResult> Generate(std::span<const int32_t> prompt_ids, LoraMode mode, const GenerateOptions& opts,
                                  const StreamCallback& on_text = {}, const MediaFeatures* media = nullptr);

  const std::vector<float>& logits() const { return logits_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  int64_t cached_tokens() const { return cache_.length(); }
  LoraMode mode() const { return mode_; }
  const Model& model() const { return *model_; }
  size_t kv_cache_bytes() const { return cache_.bytes(); }
  // Drops tokens from position n on (the cache keeps what it already computed before n).
  void Truncate(size_t n);
  void Reset();
  // Named intermediates of every forward pass go here ("prefill.*", then "step.<k>.*").
  void SetTap(TensorTap* tap) { tap_ = tap; }
  // Positions per decoder pass when a prompt is prefilled (bounds the activations; default 512).
  void set_prefill_chunk(int64_t n) { prefill_chunk_ = n; }

 private:
  // Runs the positions not yet in the cache, then `draft` after them, and leaves in logits() the
  // logits of the last position, or with a draft those of the last position and of every drafted
  // id [1 + draft.size(), vocab] (a verify step). Drafted ids stay out of the sequence; their rows
  // stay in the cache, which the caller truncates to what it takes.
  Status Run(LoraMode mode, std::span<const int32_t> draft, const std::string& tap_prefix);

  std::shared_ptr<const Model> model_;
  KvCache cache_;
  LoraMode mode_ = LoraMode::kNone;
  std::vector<int32_t> tokens_;
  // Media rows of the sequence, kept so that a recompute (LoRA mode or rotary switch) can rebuild
  // the input embeddings.
  MediaRows media_;
  std::vector<float> logits_;
  TensorTap* tap_ = nullptr;
  int64_t prefill_chunk_ = 512;
  DecoderScratch scratch_;
};

}  // namespace phi4mm
