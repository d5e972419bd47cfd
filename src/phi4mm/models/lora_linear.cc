// LoraLinear loading and forward.
#include "phi4mm/models/lora_linear.h"

#include <algorithm>

#include "phi4mm/kernels/matmul_plan.h"
#include "phi4mm/kernels/quant.h"
#include "phi4mm/models/tensor_manifest.h"
#include "phi4mm/models/weight_loading.h"

namespace phi4mm {

Status PackQ4KTail(LoraAdapter* ad, ThreadPool* pool) {
  const int64_t out = ad->b.rows(), r = ad->b.cols(), tail = r % kQ4KBlock;
  if (ad->b.format() != WeightFormat::kQ4K || tail == 0 || tail > kQ4KBlock / 2) return Status::Ok();
  const int64_t pack = kQ4KBlock / tail, lead = r - tail, packed_rows = CeilDiv(out, pack);
  std::vector<float> packed(static_cast<size_t>(packed_rows * kQ4KBlock), 0.0f), row(static_cast<size_t>(r));
  for (int64_t o = 0; o < out; ++o) {
    ad->b.Row(o, row.data());
    std::copy(row.begin() + lead, row.end(), packed.begin() + (o / pack) * kQ4KBlock + (o % pack) * tail);
  }
  PHI4MM_ASSIGN_OR_RETURN(
      ad->b_tail, WeightMatrix::FromF32(std::move(packed), packed_rows, kQ4KBlock).Quantize(WeightFormat::kQ4K, pool));
  PHI4MM_ASSIGN_OR_RETURN(ad->b_tail, ad->b_tail.ForKernels(ActiveKernels(), pool));
  if (lead > 0) {
    PHI4MM_ASSIGN_OR_RETURN(ad->b, ad->b.LeadingColumns(lead));
  } else {
    ad->b = WeightMatrix();
  }
  ad->tail = tail;
  ad->pack = pack;
  return Status::Ok();
}

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
  PHI4MM_RETURN_IF_ERROR(PackQ4KTail(&ad, pool));
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
  const int64_t in = base_.cols(), out = base_.rows();
  // The segments with an adapter: rows [begin, begin + m) and their offsets in `scratch`: the
  // low-rank rows t [m, r]; with a packed tail (LoraAdapter::b_tail), its activation rows
  // [m * pack, 256] and products [m * pack, ceil(out / pack)].
  struct Pass {
    const LoraAdapter* ad;
    int64_t begin, m;
    size_t t, tail_x, tail_y;
  };
  std::vector<Pass> passes;
  size_t size = 0;
  for (const LoraSegment& seg : segments) {
    const LoraAdapter* ad = adapter(seg.mode);
    const int64_t m = seg.end - seg.begin;
    if (ad == nullptr || m <= 0) continue;
    Pass p{ad, seg.begin, m, size, 0, 0};
    size += static_cast<size_t>(m * ad->a.rows());
    if (ad->tail > 0) {
      p.tail_x = size;
      size += static_cast<size_t>(m * ad->pack * kQ4KBlock);
      p.tail_y = size;
      size += static_cast<size_t>(m * ad->pack * ad->b_tail.rows());
    }
    passes.push_back(p);
  }
  if (passes.empty()) {
    base_.MatMul(x, n, y, pool);
    return;
  }
  const MatMulKernels& k = ActiveKernels();
  // Quantized activations: [0] the base product's; [1 + 2i] pass i's x rows, then its t rows;
  // [2 + 2i] its tail rows.
  thread_local std::vector<std::vector<uint8_t>> buffers;
  if (buffers.size() < 2 * passes.size() + 1) buffers.resize(2 * passes.size() + 1);
  scratch->resize(size);
  float* s = scratch->data();

  // t = x[seg] · Aᵀ for every pass, in one loop over the passes' row tiles laid end to end.
  {
    std::vector<MatMulPlan> a_plans;
    std::vector<int64_t> first_tile{0};  // pass i's tiles are [first_tile[i], first_tile[i + 1])
    a_plans.reserve(passes.size());
    for (size_t i = 0; i < passes.size(); ++i) {
      const Pass& p = passes[i];
      a_plans.emplace_back(p.ad->a, k, x + p.begin * in, p.m, s + p.t, false, &buffers[1 + 2 * i], pool);
      first_tile.push_back(first_tile.back() + CeilDiv(p.ad->a.rows(), a_plans.back().tile_rows()));
    }
    auto body = [&](int64_t g0, int64_t g1) {
      for (size_t i = 0; i < a_plans.size(); ++i) {
        const int64_t b = std::max(g0, first_tile[i]) - first_tile[i], e = std::min(g1, first_tile[i + 1]) - first_tile[i];
        const int64_t R = a_plans[i].tile_rows();
        if (b < e) a_plans[i].RunRows(b * R, e * R);
      }
    };
    if (pool == nullptr) body(0, first_tile.back());
    else pool->ParallelFor(first_tile.back(), body, a_plans.front().grain());
  }
  // The scale on the m x r low-rank rows, and the packed tail's activation rows: row i * pack + q
  // holds row i's last `tail` values at columns [q * tail, + tail).
  for (const Pass& p : passes) {
    const int64_t r = p.ad->a.rows();
    float* t = s + p.t;
    for (int64_t j = 0; j < p.m * r; ++j) t[j] *= p.ad->scale;
    if (p.ad->tail == 0) continue;
    float* tx = s + p.tail_x;
    std::fill(tx, tx + p.m * p.ad->pack * kQ4KBlock, 0.0f);
    for (int64_t i = 0; i < p.m; ++i)
      for (int64_t q = 0; q < p.ad->pack; ++q)
        std::copy(t + i * r + r - p.ad->tail, t + (i + 1) * r, tx + (i * p.ad->pack + q) * kQ4KBlock + q * p.ad->tail);
  }
  // y = x · Wᵀ, then y[seg] += B · t: each B pass accumulates into the output rows the base product
  // has just written, in the same loop; the packed tails' products go to scratch.
  const MatMulPlan base(base_, k, x, n, y, false, &buffers[0], pool);
  std::vector<MatMulPlan> b_plans, tail_plans;
  std::vector<int64_t> tail_pack;
  for (size_t i = 0; i < passes.size(); ++i) {
    const Pass& p = passes[i];
    if (!p.ad->b.empty())
      b_plans.emplace_back(p.ad->b, k, s + p.t, p.m, y + p.begin * out, true, &buffers[1 + 2 * i], pool,
                           p.ad->a.rows());
    if (p.ad->tail > 0) {
      tail_plans.emplace_back(p.ad->b_tail, k, s + p.tail_x, p.m * p.ad->pack, s + p.tail_y, false,
                              &buffers[2 + 2 * i], pool);
      tail_pack.push_back(p.ad->pack);
    }
  }
  const int64_t R = base.tile_rows();
  auto body = [&](int64_t g0, int64_t g1) {
    const int64_t r0 = g0 * R, r1 = std::min(out, g1 * R);
    base.RunRows(r0, r1);
    for (const MatMulPlan& b : b_plans) b.RunRows(r0, r1);
    // Packed row j holds output rows [j * pack, (j + 1) * pack): the range's share of them.
    for (size_t i = 0; i < tail_plans.size(); ++i)
      tail_plans[i].RunRows(CeilDiv(r0, tail_pack[i]), CeilDiv(r1, tail_pack[i]));
  };
  if (pool == nullptr) body(0, CeilDiv(out, R));
  else pool->ParallelFor(CeilDiv(out, R), body, base.grain());
  // The diagonal of each tail product: y[i, o] += tail_y[i * pack + o % pack, o / pack].
  for (const Pass& p : passes) {
    if (p.ad->tail == 0) continue;
    const int64_t pack = p.ad->pack, packed_rows = p.ad->b_tail.rows();
    const float* ty = s + p.tail_y;
    for (int64_t i = 0; i < p.m; ++i) {
      float* yi = y + (p.begin + i) * out;
      for (int64_t o = 0; o < out; ++o) yi[o] += ty[(i * pack + o % pack) * packed_rows + o / pack];
    }
  }
}

}  // namespace phi4mm
