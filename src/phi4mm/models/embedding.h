// The `embedding` part of the four-model split: token embedding lookup (reference:
// Phi4MultimodalModel.embed_tokens, [vocab, hidden]); image and audio features are spliced over
// the placeholder ids 200010 / 200011 by the multimodal paths. The same matrix serves as the tied
// lm_head of the decoder.
#pragma once

#include <cstdint>
#include <span>

#include "phi4mm/io/checkpoint.h"
#include "phi4mm/kernels/weight_matrix.h"

namespace phi4mm {

class TokenEmbedding {
 public:
  static Result<TokenEmbedding> Load(const Checkpoint& ckpt, const TextConfig& cfg);
  const WeightMatrix& matrix() const { return table_; }
  int64_t vocab_size() const { return table_.rows(); }
  int64_t hidden_size() const { return table_.cols(); }
  // out[ids.size(), hidden] = rows of the table; ids outside the vocabulary are an error.
  Status Embed(std::span<const int32_t> ids, float* out) const;

 private:
  WeightMatrix table_;
};

}  // namespace phi4mm
