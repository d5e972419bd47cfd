// Phi-4-mini decoder forward pass: float32 activations over weights in any WeightMatrix format,
// with the KV cache stored as float32, IEEE half or 8-bit (keys after rotary, converted when
// appended).
#include "phi4mm/models/decoder.h"

#include <cmath>
#include <cstring>

#include "phi4mm/kernels/attention.h"
#include "phi4mm/kernels/ops.h"
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

void KvCache::EnsureCapacity(int64_t positions) {
  if (positions <= capacity_) return;
  int64_t cap = std::max<int64_t>(positions, std::max<int64_t>(64, capacity_ * 2));
  const size_t n = static_cast<size_t>(cap) * row_bytes();
  for (size_t l = 0; l < k_.size(); ++l) {
    k_[l].resize(n);
    v_[l].resize(n);
  }
  capacity_ = cap;
}

Result<std::shared_ptr<const Decoder>> Decoder::Load(const Checkpoint& ckpt, const ModelConfig& mc,
                                                     std::shared_ptr<const TokenEmbedding> embedding,
                                                     QuantMode quant, ThreadPool* pool, KvDType kv_dtype) {
  const TextConfig& c = mc.text;
  const std::optional<WeightFormat> lf = LinearFormat(quant);
  std::shared_ptr<Decoder> d(new Decoder(c));
  d->embedding_ = std::move(embedding);
  d->kv_dtype_ = kv_dtype;
  const int64_t H = c.hidden_size, hd = c.head_dim;
  const int64_t qkv_out = (c.num_attention_heads + 2 * c.num_key_value_heads) * hd;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    DecoderLayerWeights L;
    PHI4MM_ASSIGN_OR_RETURN(L.input_norm, LoadVector(ckpt, p + "input_layernorm.weight", H));
    PHI4MM_ASSIGN_OR_RETURN(L.post_attn_norm, LoadVector(ckpt, p + "post_attention_layernorm.weight", H));
    PHI4MM_ASSIGN_OR_RETURN(L.qkv, LoraLinear::Load(ckpt, mc, p + "self_attn.qkv_proj", qkv_out, H, lf, pool));
    PHI4MM_ASSIGN_OR_RETURN(L.o, LoraLinear::Load(ckpt, mc, p + "self_attn.o_proj", H, c.num_attention_heads * hd, lf, pool));
    PHI4MM_ASSIGN_OR_RETURN(L.gate_up, LoraLinear::Load(ckpt, mc, p + "mlp.gate_up_proj", 2 * c.intermediate_size, H, lf, pool));
    PHI4MM_ASSIGN_OR_RETURN(L.down, LoraLinear::Load(ckpt, mc, p + "mlp.down_proj", H, c.intermediate_size, lf, pool));
    d->layers_.push_back(std::move(L));
  }
  PHI4MM_ASSIGN_OR_RETURN(d->final_norm_, LoadVector(ckpt, "model.norm.weight", H));
  if (const TensorView* lm = ckpt.Find("lm_head.weight"); lm != nullptr && !c.tie_word_embeddings) {
    PHI4MM_ASSIGN_OR_RETURN(d->untied_lm_head_, LoadWeight(ckpt, "lm_head.weight", {c.vocab_size, H}, c.vocab_size, H,
                                                           EmbeddingFormat(quant), pool));
  } else if (!c.tie_word_embeddings) {
    return NotFound("config.json says tie_word_embeddings=false but the checkpoint has no lm_head.weight");
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
  const TextConfig& c = cfg_;
  const int64_t H = c.hidden_size, nh = c.num_attention_heads, nkv = c.num_key_value_heads, hd = c.head_dim;
  const int64_t past = cache->length_;
  if (S <= 0) return InvalidArgument("decoder forward needs at least one position");
  if (past > 0 && cache->long_rope_ != long_rope)
    return Internal("the KV cache was built with the other rotary table; re-prefill before continuing");
  cache->EnsureCapacity(past + S);
  cache->long_rope_ = long_rope;

  std::vector<float> x(embeds, embeds + S * H);
  if (tap) tap->Tap(tap_prefix + "embeds", x.data(), {S, H});
  const int64_t qkv_w = (nh + 2 * nkv) * hd;
  std::vector<float> h(S * H), qkv(S * qkv_w), q(S * nh * hd), attn(S * nh * hd), tmp(S * H),
      gu(S * 2 * c.intermediate_size), act(S * c.intermediate_size), kbuf(S * nkv * hd), scratch;
  const int64_t rd = rope_.rotary_dim();
  std::vector<float> cos(S * rd), sin(S * rd);
  for (int64_t s = 0; s < S; ++s) rope_.CosSin(past + s, long_rope, cos.data() + s * rd, sin.data() + s * rd);
  const AttentionShape shape{nh, nkv, hd, 1.0f / std::sqrt(static_cast<float>(hd))};
  const float eps = static_cast<float>(c.rms_norm_eps);

  for (size_t li = 0; li < layers_.size(); ++li) {
    const DecoderLayerWeights& L = layers_[li];
    RmsNorm(x.data(), L.input_norm.data(), S, H, eps, h.data());
    L.qkv.Forward(h.data(), S, qkv.data(), mode, pool, &scratch);
    uint8_t* kc = cache->k_[li].data();
    uint8_t* vc = cache->v_[li].data();
    const size_t rb = cache->row_bytes();
    for (int64_t s = 0; s < S; ++s) {
      const float* row = qkv.data() + s * qkv_w;
      float* qs = q.data() + s * nh * hd;
      float* ks = kbuf.data() + s * nkv * hd;
      std::memcpy(qs, row, nh * hd * sizeof(float));
      std::memcpy(ks, row + nh * hd, nkv * hd * sizeof(float));
      ApplyRotary(qs, nh, hd, rd, cos.data() + s * rd, sin.data() + s * rd);
      ApplyRotary(ks, nkv, hd, rd, cos.data() + s * rd, sin.data() + s * rd);
      const float* vs = row + (nh + nkv) * hd;
      StoreKvRow(cache->dtype_, ks, nkv, hd, kc + (past + s) * rb);
      StoreKvRow(cache->dtype_, vs, nkv, hd, vc + (past + s) * rb);
    }
    CausalAttention(q.data(), KvView{kc, vc, cache->dtype_}, past, S, shape, attn.data(), pool);
    L.o.Forward(attn.data(), S, tmp.data(), mode, pool, &scratch);
    for (int64_t i = 0; i < S * H; ++i) x[i] += tmp[i];
    RmsNorm(x.data(), L.post_attn_norm.data(), S, H, eps, h.data());
    L.gate_up.Forward(h.data(), S, gu.data(), mode, pool, &scratch);
    SiluGateUp(gu.data(), S, c.intermediate_size, act.data());
    L.down.Forward(act.data(), S, tmp.data(), mode, pool, &scratch);
    for (int64_t i = 0; i < S * H; ++i) x[i] += tmp[i];
    if (tap) tap->Tap(tap_prefix + "layer." + std::to_string(li), x.data(), {S, H});
  }
  cache->length_ = past + S;
  if (tap) {
    RmsNorm(x.data(), final_norm_.data(), S, H, eps, h.data());
    tap->Tap(tap_prefix + "norm", h.data(), {S, H});
    std::memcpy(last_hidden, h.data() + (S - 1) * H, H * sizeof(float));
  } else {
    RmsNorm(x.data() + (S - 1) * H, final_norm_.data(), 1, H, eps, last_hidden);
  }
  return Status::Ok();
}

void Decoder::Logits(const float* hidden, float* logits, ThreadPool* pool) const {
  lm_head().MatMul(hidden, 1, logits, pool);
}

}  // namespace phi4mm
