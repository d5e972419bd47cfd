// LoraLinear loading and forward.
#include "phi4mm/models/lora_linear.h"

#include "phi4mm/models/tensor_manifest.h"
#include "phi4mm/models/weight_loading.h"

namespace phi4mm {

namespace {

Result<std::optional<LoraAdapter>> LoadAdapter(const Checkpoint& ckpt, const LoraAdapterConfig& lc,
                                               const std::string& prefix, const std::string& name,
                                               int64_t out, int64_t in, std::optional<WeightFormat> format,
                                               ThreadPool* pool) {
  if (!lc.present) return std::optional<LoraAdapter>();
  const LoraMode mode = name == "vision" ? LoraMode::kVision : LoraMode::kSpeech;
  const std::string a_name = names::LoraA(prefix, mode);
  const std::string b_name = names::LoraB(prefix, mode);
  if (ckpt.Find(a_name) == nullptr && ckpt.Find(b_name) == nullptr)
    return NotFound("config declares a " + name + " LoRA (r=" + std::to_string(lc.rank) + ") but the checkpoint has no '" +
                    ckpt.SourceName(a_name) + "'");
  LoraAdapter ad;
  PHI4MM_ASSIGN_OR_RETURN(ad.a, LoadWeight(ckpt, a_name, {lc.rank, in}, lc.rank, in, format, pool));
  PHI4MM_ASSIGN_OR_RETURN(ad.b, LoadWeight(ckpt, b_name, {out, lc.rank}, out, lc.rank, format, pool));
  ad.scale = static_cast<float>(lc.scale());
  return std::optional<LoraAdapter>(std::move(ad));
}

}  // namespace

Result<LoraLinear> LoraLinear::Load(const Checkpoint& ckpt, const ModelConfig& cfg, const std::string& prefix,
                                    int64_t out_features, int64_t in_features,
                                    std::optional<WeightFormat> base_format,
                                    std::optional<WeightFormat> adapter_format, ThreadPool* pool) {
  LoraLinear l;
  PHI4MM_ASSIGN_OR_RETURN(l.base_, LoadWeight(ckpt, prefix + ".weight", {out_features, in_features}, out_features,
                                              in_features, base_format, pool));
  PHI4MM_ASSIGN_OR_RETURN(l.vision_, LoadAdapter(ckpt, cfg.vision_lora, prefix, "vision", out_features, in_features,
                                                  adapter_format, pool));
  PHI4MM_ASSIGN_OR_RETURN(l.speech_, LoadAdapter(ckpt, cfg.speech_lora, prefix, "speech", out_features, in_features,
                                                  adapter_format, pool));
  return l;
}

const LoraAdapter* LoraLinear::adapter(LoraMode mode) const {
  if (mode == LoraMode::kVision && vision_) return &*vision_;
  if (mode == LoraMode::kSpeech && speech_) return &*speech_;
  return nullptr;
}

void LoraLinear::Forward(const float* x, int64_t n, float* y, LoraMode mode, ThreadPool* pool,
                         std::vector<float>* scratch) const {
  const LoraSegment all{0, n, mode};
  Forward(x, n, y, std::span(&all, 1), pool, scratch);
}

void LoraLinear::Forward(const float* x, int64_t n, float* y, std::span<const LoraSegment> segments,
                         ThreadPool* pool, std::vector<float>* scratch) const {
  base_.MatMul(x, n, y, pool);
  const int64_t in = base_.cols(), out = base_.rows();
  for (const LoraSegment& seg : segments) {
    const LoraAdapter* ad = adapter(seg.mode);
    const int64_t m = seg.end - seg.begin;
    if (ad == nullptr || m <= 0) continue;
    const int64_t r = ad->a.rows();
    scratch->resize(static_cast<size_t>(m * r));
    float* t = scratch->data();
    ad->a.MatMul(x + seg.begin * in, m, t, pool);
    // y += B (scale · A x): the scale on the m x r low-rank rows, then B accumulates into y.
    for (int64_t i = 0; i < m * r; ++i) t[i] *= ad->scale;
    ad->b.MatMul(t, m, y + seg.begin * out, pool, /*accumulate=*/true);
  }
}

}  // namespace phi4mm
