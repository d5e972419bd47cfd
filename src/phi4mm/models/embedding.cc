// TokenEmbedding loading and lookup.
#include "phi4mm/models/embedding.h"

#include <algorithm>
#include <vector>

#include "phi4mm/models/tensor_manifest.h"
#include "phi4mm/models/weight_loading.h"

namespace phi4mm {

Result<TokenEmbedding> TokenEmbedding::Load(const Checkpoint& ckpt, const TextConfig& cfg, QuantMode quant,
                                            ThreadPool* pool) {
  TokenEmbedding e;
  PHI4MM_ASSIGN_OR_RETURN(e.table_, LoadWeight(ckpt, names::kEmbedTokens, {cfg.vocab_size, cfg.hidden_size}, cfg.vocab_size,
                                               cfg.hidden_size, FormatFor(TensorRole::kEmbeddingTable, quant), pool));
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

Status TokenEmbedding::EmbedWithMedia(std::span<const int32_t> ids, std::span<const float> image_features,
                                      std::span<const float> audio_features, float* out) const {
  const int64_t H = table_.cols();
  if (image_features.size() % H != 0 || audio_features.size() % H != 0)
    return InvalidArgument("media features must have " + std::to_string(H) + " values per row");
  const size_t n_img = image_features.size() / H, n_aud = audio_features.size() / H;
  size_t want_img = 0, want_aud = 0;
  for (int32_t id : ids) {
    want_img += id == kImageTokenId;
    want_aud += id == kAudioTokenId;
  }
  if (want_img != n_img)
    return InvalidArgument("the prompt has " + std::to_string(want_img) + " image placeholder tokens but " +
                           std::to_string(n_img) + " image feature rows were given");
  if (want_aud != n_aud)
    return InvalidArgument("the prompt has " + std::to_string(want_aud) + " audio placeholder tokens but " +
                           std::to_string(n_aud) + " audio feature rows were given");
  std::vector<const float*> overrides(ids.size(), nullptr);
  size_t ki = 0, ka = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] == kImageTokenId) overrides[i] = image_features.data() + (ki++) * H;
    else if (ids[i] == kAudioTokenId) overrides[i] = audio_features.data() + (ka++) * H;
  }
  return EmbedRows(ids, overrides, out);
}

Status TokenEmbedding::EmbedRows(std::span<const int32_t> ids, std::span<const float* const> overrides,
                                 float* out) const {
  if (overrides.size() != ids.size()) return Internal("EmbedRows: one override slot per id is required");
  const int64_t H = table_.cols();
  for (size_t i = 0; i < ids.size(); ++i) {
    float* row = out + static_cast<int64_t>(i) * H;
    if (overrides[i] != nullptr) std::copy_n(overrides[i], H, row);
    else PHI4MM_RETURN_IF_ERROR(Embed(ids.subspan(i, 1), row));
  }
  return Status::Ok();
}

}  // namespace phi4mm
