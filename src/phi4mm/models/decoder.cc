// Phi-4-mini decoder forward pass: float32 activations over weights in any WeightMatrix format,
// with the KV cache stored as float32, IEEE half or 8-bit (keys after rotary, converted when
// appended).
#include "phi4mm/models/decoder.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "phi4mm/kernels/activations.h"
#include "phi4mm/kernels/attention.h"
#include "phi4mm/kernels/ops.h"
#include "phi4mm/models/tensor_manifest.h"
#include "phi4mm/models/weight_loading.h"

namespace phi4mm {

namespace {

Result<std::vector<float>> LoadVector(const Checkpoint& ckpt, const std::string& name, int64_t n) {
  return LoadFloats(ckpt, name, {n});
}

}  // namespace

KvCache::KvCache(int64_t layers, int64_t kv_heads, int64_t head_dim, KvDType dtype)
    : kv_heads_(kv_heads), head_dim_(head_dim), dtype_(dtype), k_(layers), v_(layers) {}

void KvCache::Clear() {
  length_ = 0;
  long_rope_ = false;
}

void KvCache::Truncate(int64_t n) {
  if (n < length_) length_ = std::max<int64_t>(0, n);
  if (length_ == 0) long_rope_ = false;
}

size_t KvCache::bytes() const {
  size_t b = 0;
  for (size_t l = 0; l < k_.size(); ++l) b += k_[l].capacity() + v_[l].capacity();
  return b;
}

void KvCache::Reserve(int64_t positions) {
  capacity_ = 0;
  fixed_ = false;
  for (size_t l = 0; l < k_.size(); ++l) {
    k_[l] = {};
    v_[l] = {};
  }
  length_ = 0;
  long_rope_ = false;
  const size_t n = static_cast<size_t>(std::max<int64_t>(0, positions)) * row_bytes();
  for (size_t l = 0; l < k_.size(); ++l) {
    k_[l].resize(n);
    v_[l].resize(n);
  }
  capacity_ = std::max<int64_t>(0, positions);
  fixed_ = true;
}

void KvCache::Grow(int64_t positions) {
  if (positions <= capacity_) return;
  const bool fixed = fixed_;
  fixed_ = false;
  const int64_t old = capacity_;
  const size_t n = static_cast<size_t>(positions) * row_bytes(), hb = head_bytes();
  // One buffer at a time, each exactly the new size (a vector's resize could double it).
  for (auto* layer_planes : {&k_, &v_})
    for (std::vector<uint8_t>& buf : *layer_planes) {
      std::vector<uint8_t> grown(n);
      if (length_ > 0)
        for (int64_t g = 0; g < kv_heads_; ++g)
          std::memcpy(grown.data() + g * positions * hb, buf.data() + g * old * hb, static_cast<size_t>(length_) * hb);
      buf.swap(grown);
    }
  capacity_ = positions;
  fixed_ = fixed;
}

void KvCache::ForEachRun(const std::function<void(const uint8_t*, size_t)>& f) const {
  const size_t hb = head_bytes(), plane = static_cast<size_t>(capacity_) * hb, run = static_cast<size_t>(length_) * hb;
  for (size_t l = 0; l < k_.size(); ++l)
    for (const auto* buf : {&k_[l], &v_[l]})
      for (int64_t g = 0; g < kv_heads_; ++g) f(buf->data() + g * plane, run);
}

bool KvCache::FillRuns(int64_t length, int64_t capacity, bool long_rope,
                       const std::function<bool(uint8_t*, size_t)>& read) {
  Reserve(std::max(length, capacity));
  const size_t hb = head_bytes(), plane = static_cast<size_t>(capacity_) * hb, run = static_cast<size_t>(length) * hb;
  for (size_t l = 0; l < k_.size(); ++l)
    for (auto* buf : {&k_[l], &v_[l]})
      for (int64_t g = 0; g < kv_heads_; ++g)
        if (!read(buf->data() + g * plane, run)) {
          Clear();
          return false;
        }
  length_ = length;
  long_rope_ = length > 0 && long_rope;
  return true;
}

Status KvCache::CopyPrefixFrom(const KvCache& src, int64_t n) {
  if (src.k_.size() != k_.size() || src.kv_heads_ != kv_heads_ || src.head_dim_ != head_dim_ || src.dtype_ != dtype_)
    return InvalidArgument("KV caches of different shapes or element types");
  if (n < 0 || n > src.length_) return InvalidArgument("prefix longer than the source cache");
  PHI4MM_RETURN_IF_ERROR(EnsureCapacity(n));
  const size_t hb = head_bytes(), bytes = static_cast<size_t>(n) * hb;
  const size_t plane = static_cast<size_t>(capacity_) * hb, src_plane = static_cast<size_t>(src.capacity_) * hb;
  for (size_t l = 0; l < k_.size(); ++l)
    for (int64_t g = 0; g < kv_heads_; ++g) {
      std::memcpy(k_[l].data() + g * plane, src.k_[l].data() + g * src_plane, bytes);
      std::memcpy(v_[l].data() + g * plane, src.v_[l].data() + g * src_plane, bytes);
    }
  length_ = n;
  long_rope_ = n > 0 && src.long_rope_;
  return Status::Ok();
}

Status KvCache::EnsureCapacity(int64_t positions) {
  if (positions <= capacity_) return Status::Ok();
  if (fixed_)
    return Internal("the KV cache reservation of " + std::to_string(capacity_) + " positions cannot hold " +
                    std::to_string(positions));
  int64_t cap = std::max<int64_t>(positions, std::max<int64_t>(64, capacity_ * 2));
  const size_t n = static_cast<size_t>(cap) * row_bytes(), hb = head_bytes();
  // Each head's plane moves from g * old capacity to g * new capacity (the last head first, as
  // the planes only move up); its first length_ positions are what it holds.
  for (auto* layer_planes : {&k_, &v_})
    for (std::vector<uint8_t>& buf : *layer_planes) {
      buf.resize(n);
      for (int64_t g = kv_heads_ - 1; g > 0; --g)
        std::memmove(buf.data() + g * cap * hb, buf.data() + g * capacity_ * hb, static_cast<size_t>(length_) * hb);
    }
  capacity_ = cap;
  return Status::Ok();
}

Result<std::shared_ptr<const Decoder>> Decoder::Load(const Checkpoint& ckpt, const ModelConfig& mc,
                                                     std::shared_ptr<const TokenEmbedding> embedding,
                                                     QuantMode quant, ThreadPool* pool, KvDType kv_dtype) {
  const TextConfig& c = mc.text;
  std::shared_ptr<Decoder> d(new Decoder(c));
  d->embedding_ = std::move(embedding);
  d->kv_dtype_ = kv_dtype;
  const int64_t H = c.hidden_size, hd = c.head_dim;
  const int64_t qkv_out = (c.num_attention_heads + 2 * c.num_key_value_heads) * hd;
  const std::optional<WeightFormat> adapter_format = FormatFor(TensorRole::kLoraA, quant);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = names::DecoderLayer(i);
    DecoderLayerWeights L;
    PHI4MM_ASSIGN_OR_RETURN(L.input_norm, LoadVector(ckpt, p + "input_layernorm.weight", H));
    PHI4MM_ASSIGN_OR_RETURN(L.post_attn_norm, LoadVector(ckpt, p + "post_attention_layernorm.weight", H));
    auto load = [&](const char* name, DecoderProjection proj, int64_t out, int64_t in) {
      return LoraLinear::Load(ckpt, mc, p + name, out, in, DecoderLinearFormat(quant, proj, i, c.num_hidden_layers),
                              adapter_format, pool);
    };
    PHI4MM_ASSIGN_OR_RETURN(L.qkv, load("self_attn.qkv_proj", DecoderProjection::kQkv, qkv_out, H));
    PHI4MM_ASSIGN_OR_RETURN(L.o, load("self_attn.o_proj", DecoderProjection::kO, H, c.num_attention_heads * hd));
    PHI4MM_ASSIGN_OR_RETURN(L.gate_up, load("mlp.gate_up_proj", DecoderProjection::kGateUp, 2 * c.intermediate_size, H));
    PHI4MM_ASSIGN_OR_RETURN(L.down, load("mlp.down_proj", DecoderProjection::kDown, H, c.intermediate_size));
    d->layers_.push_back(std::move(L));
  }
  PHI4MM_ASSIGN_OR_RETURN(d->final_norm_, LoadVector(ckpt, names::kFinalNorm, H));
  if (const TensorView* lm = ckpt.Find(names::kLmHead); lm != nullptr && !c.tie_word_embeddings) {
    PHI4MM_ASSIGN_OR_RETURN(d->untied_lm_head_, LoadWeight(ckpt, names::kLmHead, {c.vocab_size, H}, c.vocab_size, H,
                                                           FormatFor(TensorRole::kLmHead, quant), pool));
  } else if (!c.tie_word_embeddings) {
    return NotFound("the checkpoint has no lm_head.weight, and config.json does not tie the output layer to the "
                    "embedding (tie_word_embeddings is false, or absent, which transformers reads as false)");
  }
  return std::shared_ptr<const Decoder>(std::move(d));
}

const WeightMatrix& Decoder::lm_head() const {
  return untied_lm_head_.empty() ? embedding_->matrix() : untied_lm_head_;
}

size_t Decoder::weight_bytes(bool include_lora) const {
  size_t b = 0;
  for (const auto& L : layers_) {
    for (const LoraLinear* l : {&L.qkv, &L.o, &L.gate_up, &L.down}) {
      b += l->base().bytes();
      if (include_lora)
        for (LoraMode m : {LoraMode::kVision, LoraMode::kSpeech})
          if (const LoraAdapter* a = l->adapter(m)) b += a->a.bytes() + a->b.bytes();
    }
    b += (L.input_norm.size() + L.post_attn_norm.size()) * sizeof(float);
  }
  return b + final_norm_.size() * sizeof(float) + (untied_lm_head_.empty() ? 0 : untied_lm_head_.bytes());
}

Status Decoder::Forward(const float* embeds, int64_t S, LoraMode mode, bool long_rope, KvCache* cache,
                        ThreadPool* pool, TensorTap* tap, const std::string& tap_prefix,
                        float* last_hidden) const {
  DecoderScratch scratch;
  const SeqChunk chunk{embeds, S, cache, mode, long_rope, last_hidden};
  return Step(std::span(&chunk, 1), pool, &scratch, tap, tap_prefix);
}

// Profiling of a step (DecoderScratch::times): each lap adds the time since the previous one to a part.
class Decoder::StepClock {
 public:
  explicit StepClock(DecoderStepTimes* times) : times_(times), mark_(times ? Clock::now() : Clock::time_point{}) {}
  void Lap(double DecoderStepTimes::*part) {
    if (times_ == nullptr) return;
    const Clock::time_point now = Clock::now();
    times_->*part += std::chrono::duration<double>(now - mark_).count();
    mark_ = now;
  }

 private:
  using Clock = std::chrono::steady_clock;
  DecoderStepTimes* times_;
  Clock::time_point mark_;
};

Status Decoder::Step(std::span<const SeqChunk> chunks, ThreadPool* pool, DecoderScratch* sc, TensorTap* tap,
                     const std::string& tap_prefix) const {
  if (chunks.size() > 1) tap = nullptr;
  PHI4MM_RETURN_IF_ERROR(PlanStep(chunks, sc));
  const int64_t R = sc->rows, H = cfg_.hidden_size;
  if (tap) tap->Tap(tap_prefix + "embeds", sc->x.data(), {R, H});
  StepClock clock(sc->times);
  for (size_t li = 0; li < layers_.size(); ++li) {
    Layer(li, chunks, pool, sc, clock);
    if (tap) tap->Tap(tap_prefix + "layer." + std::to_string(li), sc->x.data(), {R, H});
  }
  // Final norm (Phi4MultimodalModel.forward's self.norm) for the rows whose hidden state is asked for.
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  const float* x = sc->x.data();
  float* h = sc->h.data();
  if (tap) {
    RmsNorm(x, final_norm_.data(), R, H, eps, h);
    tap->Tap(tap_prefix + "norm", h, {R, H});
  }
  for (size_t i = 0; i < chunks.size(); ++i) {
    const SeqChunk& ch = chunks[i];
    const int64_t row0 = sc->row0[i];
    ch.cache->length_ = sc->past[i] + ch.n;
    if (ch.all_hidden != nullptr) {
      if (tap) std::memcpy(ch.all_hidden, h + row0 * H, ch.n * H * sizeof(float));
      else RmsNorm(x + row0 * H, final_norm_.data(), ch.n, H, eps, ch.all_hidden);
    }
    if (ch.last_hidden == nullptr) continue;
    const int64_t last = row0 + ch.n - 1;
    if (tap) std::memcpy(ch.last_hidden, h + last * H, H * sizeof(float));
    else RmsNorm(x + last * H, final_norm_.data(), 1, H, eps, ch.last_hidden);
  }
  return Status::Ok();
}

Status Decoder::PlanStep(std::span<const SeqChunk> chunks, DecoderScratch* sc) const {
  const TextConfig& c = cfg_;
  const int64_t H = c.hidden_size, nh = c.num_attention_heads, nkv = c.num_key_value_heads, hd = c.head_dim;
  const int64_t rd = rope_.rotary_dim(), I = c.intermediate_size;
  if (chunks.empty()) return InvalidArgument("decoder step needs at least one chunk");
  // Validate everything before touching any cache, so a refused step changes nothing.
  int64_t R = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const SeqChunk& ch = chunks[i];
    if (ch.n <= 0 || ch.embeds == nullptr || ch.cache == nullptr)
      return InvalidArgument("decoder step: every chunk needs embeddings for at least one position and a KV cache");
    if (ch.cache->length_ > 0 && ch.cache->long_rope_ != ch.long_rope)
      return Internal("the KV cache was built with the other rotary table; re-prefill before continuing");
    if (ch.cache->fixed_ && ch.cache->length_ + ch.n > ch.cache->capacity_)
      return Internal("the KV cache reservation of " + std::to_string(ch.cache->capacity_) + " positions cannot hold " +
                      std::to_string(ch.cache->length_ + ch.n));
    for (size_t j = 0; j < i; ++j)
      if (chunks[j].cache == ch.cache) return InvalidArgument("decoder step: two chunks share one KV cache");
    R += ch.n;
  }
  // Rows ordered by LoRA mode (stable), so every mode's rows form one segment.
  std::vector<size_t>& order = sc->order;
  order.resize(chunks.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return chunks[a].mode < chunks[b].mode; });
  sc->row0.resize(chunks.size());
  sc->past.resize(chunks.size());
  sc->segments.clear();
  int64_t r = 0;
  for (size_t oi : order) {
    const SeqChunk& ch = chunks[oi];
    PHI4MM_RETURN_IF_ERROR(ch.cache->EnsureCapacity(ch.cache->length_ + ch.n));
    ch.cache->long_rope_ = ch.long_rope;
    sc->row0[oi] = r;
    sc->past[oi] = ch.cache->length_;
    if (!sc->segments.empty() && sc->segments.back().mode == ch.mode) sc->segments.back().end = r + ch.n;
    else sc->segments.push_back({r, r + ch.n, ch.mode});
    r += ch.n;
  }
  sc->rows = R;
  for (auto [v, n] : {std::pair{&sc->x, R * H}, {&sc->h, R * H}, {&sc->qkv, R * (nh + 2 * nkv) * hd},
                      {&sc->q, R * nh * hd}, {&sc->attn, R * nh * hd}, {&sc->tmp, R * H}, {&sc->gu, R * 2 * I},
                      {&sc->act, R * I}, {&sc->kbuf, R * nkv * hd}, {&sc->cos, R * rd}, {&sc->sin, R * rd}})
    if (v->size() < static_cast<size_t>(n)) v->resize(static_cast<size_t>(n));
  // The step's input rows and every row's rotary cos/sin at its position.
  for (size_t i = 0; i < chunks.size(); ++i) {
    const SeqChunk& ch = chunks[i];
    const int64_t row0 = sc->row0[i];
    std::memcpy(sc->x.data() + row0 * H, ch.embeds, sizeof(float) * ch.n * H);
    for (int64_t s = 0; s < ch.n; ++s)
      rope_.CosSin(sc->past[i] + s, ch.long_rope, sc->cos.data() + (row0 + s) * rd, sc->sin.data() + (row0 + s) * rd);
  }
  return Status::Ok();
}

// One decoder layer over all rows of the step (sc->x [R, hidden], updated in place). Mirrors
// Phi4MultimodalDecoderLayer.forward (original: Phi4MMDecoderLayer.forward), dropout being off:
//   residual = x; x = input_layernorm(x); x = self_attn(x); x = residual + x
//   residual = x; x = post_attention_layernorm(x); x = mlp(x); x = residual + x
// self_attn (Phi4MultimodalAttention.forward): qkv = qkv_proj(x) [R, (nh + 2 nkv) hd]; rotary on the
// first rotary_dim of every q and k head; k, v appended to each sequence's cache; causal GQA
// attention per sequence; o_proj. mlp (Phi4MultimodalMLP.forward): gate, up = gate_up_proj(x).chunk(2);
// down_proj(up * silu(gate)). Every projection adds the LoRA of each row's mode (LoraLinear segments).
void Decoder::Layer(size_t li, std::span<const SeqChunk> chunks, ThreadPool* pool, DecoderScratch* sc,
                    StepClock& clock) const {
  const TextConfig& c = cfg_;
  const int64_t H = c.hidden_size, nh = c.num_attention_heads, nkv = c.num_key_value_heads, hd = c.head_dim;
  const int64_t rd = rope_.rotary_dim(), qkv_w = (nh + 2 * nkv) * hd, I = c.intermediate_size, R = sc->rows;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const std::span<const LoraSegment> segs(sc->segments);
  const DecoderLayerWeights& L = layers_[li];
  float *x = sc->x.data(), *h = sc->h.data(), *qkv = sc->qkv.data(), *q = sc->q.data(), *attn = sc->attn.data();
  float *tmp = sc->tmp.data(), *kbuf = sc->kbuf.data();
  const float *cos = sc->cos.data(), *sin = sc->sin.data();

  RmsNorm(x, L.input_norm.data(), R, H, eps, h);
  L.qkv.Forward(h, R, qkv, segs, pool, &sc->lora);
  clock.Lap(&DecoderStepTimes::qkv);
  std::vector<AttentionJob>& jobs = sc->attention_jobs;
  jobs.clear();
  for (size_t i = 0; i < chunks.size(); ++i) {
    const SeqChunk& ch = chunks[i];
    KvCache* cache = ch.cache;
    const int64_t row0 = sc->row0[i], past = sc->past[i];
    uint8_t* kc = cache->k_[li].data();
    uint8_t* vc = cache->v_[li].data();
    const int64_t hb = static_cast<int64_t>(cache->head_bytes()), plane = cache->capacity_ * hb;
    for (int64_t s = 0; s < ch.n; ++s) {
      const int64_t row = row0 + s;
      const float* in = qkv + row * qkv_w;
      float* qs = q + row * nh * hd;
      float* ks = kbuf + row * nkv * hd;
      std::memcpy(qs, in, nh * hd * sizeof(float));
      std::memcpy(ks, in + nh * hd, nkv * hd * sizeof(float));
      ApplyRotary(qs, nh, hd, rd, cos + row * rd, sin + row * rd);
      ApplyRotary(ks, nkv, hd, rd, cos + row * rd, sin + row * rd);
      const float* vs = in + (nh + nkv) * hd;
      for (int64_t g = 0; g < nkv; ++g) {
        StoreKvRow(cache->dtype_, ks + g * hd, 1, hd, kc + g * plane + (past + s) * hb);
        StoreKvRow(cache->dtype_, vs + g * hd, 1, hd, vc + g * plane + (past + s) * hb);
      }
    }
    jobs.push_back({q + row0 * nh * hd, KvView{kc, vc, cache->dtype_, hb, plane}, past, ch.n, attn + row0 * nh * hd});
  }
  // All sequences' attention in one call: the decode rows of a batch share one dispatch.
  const AttentionShape shape{nh, nkv, hd, 1.0f / std::sqrt(static_cast<float>(hd))};
  CausalAttention(jobs, shape, pool);
  clock.Lap(&DecoderStepTimes::attention);
  L.o.Forward(attn, R, tmp, segs, pool, &sc->lora);
  for (int64_t i = 0; i < R * H; ++i) x[i] += tmp[i];
  clock.Lap(&DecoderStepTimes::o);
  RmsNorm(x, L.post_attn_norm.data(), R, H, eps, h);
  L.gate_up.Forward(h, R, sc->gu.data(), segs, pool, &sc->lora);
  clock.Lap(&DecoderStepTimes::gate_up);
  SiluGateUpRows(sc->gu.data(), R, I, sc->act.data(), pool);
  clock.Lap(&DecoderStepTimes::activation);
  L.down.Forward(sc->act.data(), R, tmp, segs, pool, &sc->lora);
  for (int64_t i = 0; i < R * H; ++i) x[i] += tmp[i];
  clock.Lap(&DecoderStepTimes::down);
}

void Decoder::LogitsRows(const float* hidden, int64_t n, float* logits, ThreadPool* pool) const {
  lm_head().MatMul(hidden, n, logits, pool);
}

}  // namespace phi4mm
