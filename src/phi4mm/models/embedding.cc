// TokenEmbedding loading and lookup.
#include "phi4mm/models/embedding.h"

namespace phi4mm {

Result<TokenEmbedding> TokenEmbedding::Load(const Checkpoint& ckpt, const TextConfig& cfg) {
  TokenEmbedding e;
  PHI4MM_ASSIGN_OR_RETURN(TensorView t, ckpt.Get("model.embed_tokens.weight", {cfg.vocab_size, cfg.hidden_size}));
  PHI4MM_ASSIGN_OR_RETURN(e.table_, WeightMatrix::FromData(t.dtype, t.data, cfg.vocab_size, cfg.hidden_size));
  return e;
}

Status TokenEmbedding::Embed(std::span<const int32_t> ids, float* out) const {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= table_.rows())
      return InvalidArgument("token id " + std::to_string(ids[i]) + " is outside the model's vocabulary [0, " +
                             std::to_string(table_.rows()) + ")");
    table_.Row(ids[i], out + static_cast<int64_t>(i) * table_.cols());
  }
  return Status::Ok();
}

}  // namespace phi4mm
