// The `embedding` part of the four-model split: token embedding lookup (reference:
// Phi4MultimodalModel.embed_tokens, [vocab, hidden]); image and audio features are spliced over
// the placeholder ids 200010 / 200011 by the multimodal paths. The same matrix serves as the tied
// lm_head of the decoder, so it may be stored quantized (LoadOptions::quant); lookups dequantize.
#pragma once

#include <cstdint>
#include <span>

#include "phi4mm/io/checkpoint.h"
#include "phi4mm/kernels/weight_matrix.h"
#include "phi4mm/tokenizer/chat_format.h"

namespace phi4mm {

class TokenEmbedding {
 public:
  // The table is converted to FormatFor(kEmbeddingTable, quant) (models/tensor_manifest.h) when that is set (rows split over `pool`).
  static Result<TokenEmbedding> Load(const Checkpoint& ckpt, const TextConfig& cfg,
                                     QuantMode quant = QuantMode::kNone, ThreadPool* pool = nullptr);
  const WeightMatrix& matrix() const { return table_; }
  int64_t vocab_size() const { return table_.rows(); }
  int64_t hidden_size() const { return table_.cols(); }
  // out[ids.size(), hidden] = rows of the table; ids outside the vocabulary are an error.
  Status Embed(std::span<const int32_t> ids, float* out) const;
  // The `embedding` model of the split (reference: Phi4MMImageAudioEmbedding.forward): like Embed,
  // but the k-th occurrence of kImageTokenId takes row k of image_features [n, hidden] and
  // the k-th kAudioTokenId row k of audio_features. The numbers of placeholders and of
  // feature rows must match exactly.
  Status EmbedWithMedia(std::span<const int32_t> ids, std::span<const float> image_features,
                        std::span<const float> audio_features, float* out) const;
  // The splice itself: position i takes `overrides[i]` (hidden floats) when it is not null, else
  // the table row of ids[i].
  Status EmbedRows(std::span<const int32_t> ids, std::span<const float* const> overrides, float* out) const;

 private:
  WeightMatrix table_;
};

}  // namespace phi4mm
