// SpeechModel: the Conformer audio encoder and the two audio projections (reference-spec §5),
// mirroring transformers 4.57.1 Phi4MultimodalAudioEmbedding / Phi4MultimodalAudioModel and
// Microsoft's speech_conformer_encoder.ConformerEncoder in eval mode, one clip at a time. Shapes in
// comments use T = log-mel frames, T' = encoder frames (= ceil(T / time_reduction)), D = audio
// hidden size, C = NeMo conv channels, F' = mel bins after subsampling, I = FFN inner size, H = heads,
// L = frames per encoder chunk (T', or 500 when T' > 500), Ht = text hidden size.
#include "phi4mm/models/speech.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "phi4mm/kernels/conv.h"
#include "phi4mm/kernels/ops.h"
#include "phi4mm/kernels/speech_ops.h"
#include "phi4mm/kernels/weight_matrix.h"
#include "phi4mm/models/tensor_manifest.h"
#include "phi4mm/models/weight_loading.h"

namespace phi4mm {

namespace {

constexpr float kLayerNormEps = 1e-5f;  // every nn.LayerNorm of the encoder uses the default eps
// Phi4MultimodalAudioModel.forward: `max_seq_len = 500`; longer encoder sequences are zero-padded to
// a multiple of it and every block runs on each 500-frame chunk independently (spec §5.4).
constexpr int64_t kMaxSeqLen = 500;
const std::string kPrefix = names::kSpeechPrefix;

// nn.Linear, or a Conv1d/Conv2d with a 1-wide kernel (weight [out, in, 1(, 1)]), with bias.
struct Linear {
  WeightMatrix w;        // [out, in]
  std::vector<float> b;  // [out]
  // y[n, out] = x[n, in]·Wᵀ + b
  void Apply(const float* x, int64_t n, float* y, ThreadPool* pool) const {
    const int64_t out = w.rows();
    for (int64_t i = 0; i < n; ++i) std::copy(b.begin(), b.end(), y + i * out);
    w.MatMul(x, n, y, pool, /*accumulate=*/true);
  }
};

// `format`: the weight's format (std::nullopt = as stored), converted over `pool`.
Result<Linear> LoadLinear(const Checkpoint& ckpt, const std::string& base, const std::vector<int64_t>& shape,
                          std::optional<WeightFormat> format = std::nullopt, ThreadPool* pool = nullptr) {
  Linear l;
  int64_t cols = 1;
  for (size_t i = 1; i < shape.size(); ++i) cols *= shape[i];
  PHI4MM_ASSIGN_OR_RETURN(l.w, LoadWeight(ckpt, base + ".weight", shape, shape[0], cols, format, pool));
  PHI4MM_ASSIGN_OR_RETURN(l.b, LoadFloats(ckpt, base + ".bias", {shape[0]}));
  return l;
}

struct LayerNormW {
  std::vector<float> w, b;  // [D]
  void Apply(const float* x, int64_t n, float* y, ThreadPool* pool) const {
    LayerNorm(x, w.data(), b.data(), n, static_cast<int64_t>(w.size()), kLayerNormEps, y, pool);
  }
};

Result<LayerNormW> LoadLayerNorm(const Checkpoint& ckpt, const std::string& base, int64_t d) {
  LayerNormW n;
  PHI4MM_ASSIGN_OR_RETURN(n.w, LoadFloats(ckpt, base + ".weight", {d}));
  PHI4MM_ASSIGN_OR_RETURN(n.b, LoadFloats(ckpt, base + ".bias", {d}));
  return n;
}

// Phi4MultimodalAudioMLP (ORIG FeedForward): LN, gate_up [2I, D] whose FIRST half is the value and
// SECOND half the gate (the opposite of the text decoder's gate_up), value·swish(gate), down [D, I].
struct FeedForward {
  LayerNormW norm;
  Linear gate_up, down;
};

struct Block {
  FeedForward ff_in, ff_out;
  LayerNormW norm_att;
  Linear q, k, v, o;  // [D, D] each
  // Phi4MultimodalAudioConvModule: LN, GLU pointwise conv [2D, D] with b1/b2 [D], causal depthwise
  // conv [D, 1, K] + bias, pointwise [D, D], swish, ext pointwise [D, D].
  LayerNormW norm_conv;
  Linear glu_pw;
  std::vector<float> glu_b1, glu_b2;
  std::vector<float> dw_w, dw_b;
  Linear dw_pw, ext_pw;
  LayerNormW norm_final;
};

Result<FeedForward> LoadFeedForward(const Checkpoint& ckpt, const std::string& p, int64_t d, int64_t inner,
                                    std::optional<WeightFormat> format, ThreadPool* pool) {
  FeedForward f;
  PHI4MM_ASSIGN_OR_RETURN(f.norm, LoadLayerNorm(ckpt, p + "layer_norm", d));
  PHI4MM_ASSIGN_OR_RETURN(f.gate_up, LoadLinear(ckpt, p + "gate_up_proj", {2 * inner, d}, format, pool));
  PHI4MM_ASSIGN_OR_RETURN(f.down, LoadLinear(ckpt, p + "down_proj", {d, inner}, format, pool));
  return f;
}

// Reusable activations of one chunk.
struct Scratch {
  std::vector<float> n, a, b, q, k, v, att;
  void Reserve(int64_t L, int64_t d, int64_t inner) {
    const auto big = static_cast<size_t>(L * std::max(2 * inner, 2 * d));
    n.resize(static_cast<size_t>(L * d));
    a.resize(big);
    b.resize(big);
    q.resize(n.size());
    k.resize(n.size());
    v.resize(n.size());
    att.resize(n.size());
  }
};

// x += 0.5 · FeedForward(x), x: [L, D]  (ConformerEncoderLayer: `x + 0.5 * feed_forward_in(x)`).
void HalfStepFeedForward(const FeedForward& f, float* x, int64_t L, int64_t d, int64_t inner, Scratch& s,
                         ThreadPool* pool) {
  f.norm.Apply(x, L, s.n.data(), pool);
  f.gate_up.Apply(s.n.data(), L, s.a.data(), pool);                         // [L, 2I]
  GatedSwish(s.a.data(), L, inner, nullptr, nullptr, s.b.data(), pool);    // [L, I]
  f.down.Apply(s.b.data(), L, s.a.data(), pool);                           // [L, D]
  for (int64_t i = 0; i < L * d; ++i) x[i] += 0.5f * s.a[static_cast<size_t>(i)];
}

// Phi4MultimodalAudioConformerEncoderLayer.forward on one chunk x [L, D] (in place).
void ConformerBlock(const Block& blk, float* x, int64_t L, const AudioConfig& c, const float* rel_bias,
                    const uint8_t* allowed, Scratch& s, ThreadPool* pool) {
  const int64_t d = c.hidden_size, inner = c.intermediate_size, heads = c.num_attention_heads;
  HalfStepFeedForward(blk.ff_in, x, L, d, inner, s, pool);

  // Self-attention (Phi4MultimodalAudioAttention, eager): softmax(q·kᵀ·d_k^-0.5 + bias) v, o_proj.
  blk.norm_att.Apply(x, L, s.n.data(), pool);
  blk.q.Apply(s.n.data(), L, s.q.data(), pool);
  blk.k.Apply(s.n.data(), L, s.k.data(), pool);
  blk.v.Apply(s.n.data(), L, s.v.data(), pool);
  RelBiasAttentionShape shape;
  shape.seq = L;
  shape.n_heads = heads;
  shape.head_dim = d / heads;
  shape.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d / heads)));
  RelBiasSelfAttention(s.q.data(), s.k.data(), s.v.data(), rel_bias, allowed, shape, s.att.data(), pool);
  blk.o.Apply(s.att.data(), L, s.n.data(), pool);
  for (int64_t i = 0; i < L * d; ++i) x[i] += s.n[static_cast<size_t>(i)];

  // Convolution module (Phi4MultimodalAudioConvModule.forward).
  blk.norm_conv.Apply(x, L, s.n.data(), pool);
  blk.glu_pw.Apply(s.n.data(), L, s.a.data(), pool);                               // [L, 2D]
  GatedSwish(s.a.data(), L, d, blk.glu_b1.data(), blk.glu_b2.data(), s.b.data(), pool);  // [L, D]
  CausalDepthwiseConv1d(s.b.data(), L, d, blk.dw_w.data(), c.kernel_size, blk.dw_b.data(), s.a.data(), pool);
  blk.dw_pw.Apply(s.a.data(), L, s.b.data(), pool);                                // [L, D]
  SwishInPlace(s.b.data(), L * d, pool);
  blk.ext_pw.Apply(s.b.data(), L, s.n.data(), pool);
  for (int64_t i = 0; i < L * d; ++i) x[i] += s.n[static_cast<size_t>(i)];

  HalfStepFeedForward(blk.ff_out, x, L, d, inner, s, pool);
  blk.norm_final.Apply(x, L, x, pool);
}

// adaptive_enc_mask(L, arange(0, L, chunk_size), left_window = left_chunk) as [L, L] (1 = query i
// may see key j): key j in [max(ci - left_chunk, 0)·chunk_size, min((ci + 1)·chunk_size, L)) with
// ci = i / chunk_size. Empty (no mask: all keys) when chunk_size <= 0, which is the released
// configuration (chunk_size = -1 makes the chunk-start list empty and the mask all True).
std::vector<uint8_t> StreamingMask(int64_t L, int64_t chunk_size, int64_t left_chunk) {
  std::vector<uint8_t> m;
  if (chunk_size <= 0) return m;
  m.assign(static_cast<size_t>(L * L), 0);
  for (int64_t i = 0; i < L; ++i) {
    const int64_t ci = i / chunk_size;
    const int64_t lo = std::max<int64_t>(ci - left_chunk, 0) * chunk_size;
    const int64_t hi = std::min((ci + 1) * chunk_size, L);
    for (int64_t j = lo; j < hi; ++j) m[static_cast<size_t>(i * L + j)] = 1;
  }
  return m;
}

void TapIf(TensorTap* tap, const std::string& name, const float* data, std::vector<int64_t> shape) {
  if (tap) tap->Tap(name, data, shape);
}

}  // namespace

struct SpeechModel::Weights {
  AudioConfig cfg;
  int64_t text_hidden = 0;
  int64_t final_freq = 0;               // F'
  std::vector<float> mean, invstd;      // [input_size]
  std::vector<float> conv0_w, conv0_b;  // [C, 1, 3, 3], [C]
  struct Stage {
    std::vector<float> dw_w, dw_b;  // [C, 1, 3, 3], [C]
    Linear pw;                      // [C, C, 1, 1]
  };
  std::vector<Stage> stages;  // log2(time_reduction) - 1 depthwise-separable stride-2 stages
  Linear out;                 // [D, C·F']
  std::vector<float> rel_table;  // [2·bias_max_distance, H]
  std::vector<Block> blocks;
  Linear up_speech, down_speech, up_vision_speech, down_vision_speech;  // [Ht, D], [Ht, Ht]
};

std::optional<WeightFormat> SpeechModel::EncoderLinearFormat(QuantMode quant) {
  return FormatFor(TensorRole::kEncoderLinear, quant);
}

WeightFormat SpeechModel::linear_format() const {
  return w_->blocks.empty() ? w_->out.w.format() : w_->blocks.front().ff_in.gate_up.w.format();
}

Result<std::shared_ptr<const SpeechModel>> SpeechModel::Load(const Checkpoint& ckpt, const ModelConfig& cfg,
                                                             QuantMode quant, ThreadPool* pool) {
  const AudioConfig& c = cfg.audio;
  const int64_t d = c.hidden_size, ch = c.nemo_conv_channels, inner = c.intermediate_size;
  if (c.num_attention_heads <= 0 || d % c.num_attention_heads != 0)
    return InvalidArgument("audio config: hidden_size " + std::to_string(d) + " is not a multiple of " +
                           "num_attention_heads " + std::to_string(c.num_attention_heads));
  if (c.ext_pw_out_channel != d || c.depthwise_separable_out_channel != d || c.depthwise_multiplier != 1)
    return Unsupported("audio config: only ext_pw_out_channel = depthwise_separable_out_channel = hidden_size (" +
                       std::to_string(d) + ") with depthwise_multiplier 1 is supported (as in Phi-4-multimodal); got " +
                       std::to_string(c.ext_pw_out_channel) + ", " + std::to_string(c.depthwise_separable_out_channel) +
                       ", " + std::to_string(c.depthwise_multiplier));
  int64_t sampling = 0;
  while ((int64_t{2} << sampling) <= c.time_reduction) ++sampling;
  if (c.time_reduction < 2 || (int64_t{1} << sampling) != c.time_reduction)
    return Unsupported("audio config: time_reduction " + std::to_string(c.time_reduction) +
                       " is not a power of two >= 2 (NeMo dw_striding subsampling)");
  if (c.kernel_size < 1 || c.bias_max_distance < 1 || c.input_size < 1)
    return InvalidArgument("audio config: kernel_size, bias_max_distance and input_size must be positive");

  const std::optional<WeightFormat> lin = EncoderLinearFormat(quant);
  auto w = std::make_shared<Weights>();
  w->cfg = c;
  w->text_hidden = cfg.text.hidden_size;
  const std::string e = kPrefix + "encoder.";
  PHI4MM_ASSIGN_OR_RETURN(w->mean, LoadFloats(ckpt, e + "encoder_embedding.global_mean", {c.input_size}));
  PHI4MM_ASSIGN_OR_RETURN(w->invstd, LoadFloats(ckpt, e + "encoder_embedding.global_invstd", {c.input_size}));
  PHI4MM_ASSIGN_OR_RETURN(w->conv0_w, LoadFloats(ckpt, e + "embed.conv.0.weight", {ch, 1, 3, 3}));
  PHI4MM_ASSIGN_OR_RETURN(w->conv0_b, LoadFloats(ckpt, e + "embed.conv.0.bias", {ch}));
  int64_t freq = Stride2Length(c.input_size);
  for (int64_t s = 1; s < sampling; ++s) {  // nn.Sequential indices: conv.{3s-1} depthwise, conv.{3s} pointwise
    Weights::Stage st;
    const std::string dw = e + "embed.conv." + std::to_string(3 * s - 1), pw = e + "embed.conv." + std::to_string(3 * s);
    PHI4MM_ASSIGN_OR_RETURN(st.dw_w, LoadFloats(ckpt, dw + ".weight", {ch, 1, 3, 3}));
    PHI4MM_ASSIGN_OR_RETURN(st.dw_b, LoadFloats(ckpt, dw + ".bias", {ch}));
    PHI4MM_ASSIGN_OR_RETURN(st.pw, LoadLinear(ckpt, pw, {ch, ch, 1, 1}, lin, pool));
    w->stages.push_back(std::move(st));
    freq = Stride2Length(freq);
  }
  w->final_freq = freq;
  PHI4MM_ASSIGN_OR_RETURN(w->out, LoadLinear(ckpt, e + "embed.out", {d, ch * freq}, lin, pool));
  PHI4MM_ASSIGN_OR_RETURN(w->rel_table, LoadFloats(ckpt, e + "relative_attention_bias_layer.bias_values.weight",
                                                   {2 * c.bias_max_distance, c.num_attention_heads}));
  for (int64_t j = 0; j < c.num_blocks; ++j) {
    const std::string p = e + "encoders." + std::to_string(j) + ".";
    Block b;
    PHI4MM_ASSIGN_OR_RETURN(b.ff_in, LoadFeedForward(ckpt, p + "feed_forward_in.", d, inner, lin, pool));
    PHI4MM_ASSIGN_OR_RETURN(b.ff_out, LoadFeedForward(ckpt, p + "feed_forward_out.", d, inner, lin, pool));
    PHI4MM_ASSIGN_OR_RETURN(b.norm_att, LoadLayerNorm(ckpt, p + "layer_norm_att", d));
    PHI4MM_ASSIGN_OR_RETURN(b.q, LoadLinear(ckpt, p + "self_attn.q_proj", {d, d}, lin, pool));
    PHI4MM_ASSIGN_OR_RETURN(b.k, LoadLinear(ckpt, p + "self_attn.k_proj", {d, d}, lin, pool));
    PHI4MM_ASSIGN_OR_RETURN(b.v, LoadLinear(ckpt, p + "self_attn.v_proj", {d, d}, lin, pool));
    PHI4MM_ASSIGN_OR_RETURN(b.o, LoadLinear(ckpt, p + "self_attn.o_proj", {d, d}, lin, pool));
    PHI4MM_ASSIGN_OR_RETURN(b.norm_conv, LoadLayerNorm(ckpt, p + "conv.layer_norm", d));
    PHI4MM_ASSIGN_OR_RETURN(b.glu_pw, LoadLinear(ckpt, p + "conv.glu.ext_pw_conv_1d", {2 * d, d, 1}, lin, pool));
    PHI4MM_ASSIGN_OR_RETURN(b.glu_b1, LoadFloats(ckpt, p + "conv.glu.b1", {1, d, 1}));
    PHI4MM_ASSIGN_OR_RETURN(b.glu_b2, LoadFloats(ckpt, p + "conv.glu.b2", {1, d, 1}));
    PHI4MM_ASSIGN_OR_RETURN(b.dw_w, LoadFloats(ckpt, p + "conv.dw_sep_conv_1d.dw_conv.weight", {d, 1, c.kernel_size}));
    PHI4MM_ASSIGN_OR_RETURN(b.dw_b, LoadFloats(ckpt, p + "conv.dw_sep_conv_1d.dw_conv.bias", {d}));
    PHI4MM_ASSIGN_OR_RETURN(b.dw_pw, LoadLinear(ckpt, p + "conv.dw_sep_conv_1d.pw_conv", {d, d, 1}, lin, pool));
    PHI4MM_ASSIGN_OR_RETURN(b.ext_pw, LoadLinear(ckpt, p + "conv.ext_pw_conv_1d", {d, d, 1}, lin, pool));
    PHI4MM_ASSIGN_OR_RETURN(b.norm_final, LoadLayerNorm(ckpt, p + "layer_norm", d));
    w->blocks.push_back(std::move(b));
  }
  const int64_t ht = cfg.text.hidden_size;
  PHI4MM_ASSIGN_OR_RETURN(w->up_speech, LoadLinear(ckpt, kPrefix + "up_proj_for_speech", {ht, d}));
  PHI4MM_ASSIGN_OR_RETURN(w->down_speech, LoadLinear(ckpt, kPrefix + "down_proj_for_speech", {ht, ht}));
  PHI4MM_ASSIGN_OR_RETURN(w->up_vision_speech, LoadLinear(ckpt, kPrefix + "up_proj_for_vision_speech", {ht, d}));
  PHI4MM_ASSIGN_OR_RETURN(w->down_vision_speech, LoadLinear(ckpt, kPrefix + "down_proj_for_vision_speech", {ht, ht}));

  std::shared_ptr<SpeechModel> m(new SpeechModel());
  m->w_ = std::move(w);
  return std::shared_ptr<const SpeechModel>(std::move(m));
}

struct SpeechEncodeJob::State {
  std::shared_ptr<const SpeechModel::Weights> w;
  bool with_image = false;
  int64_t num_tokens = 0, t_enc = 0, L = 0, nchunks = 0;
  std::vector<float> h, rel_bias;
  std::vector<uint8_t> allowed;
  Scratch scratch;
  size_t next_block = 0;
  TensorTap* tap = nullptr;
  std::string tap_prefix;
};

int64_t SpeechEncodeJob::blocks() const { return s_ ? static_cast<int64_t>(s_->w->blocks.size()) : 0; }
int64_t SpeechEncodeJob::blocks_done() const { return s_ ? static_cast<int64_t>(s_->next_block) : 0; }

Result<std::vector<float>> SpeechModel::Encode(const AudioFeatures& features, bool with_image, ThreadPool* pool,
                                               TensorTap* tap, const std::string& tap_prefix) const {
  ThreadPool local(1);
  if (pool == nullptr) pool = &local;
  PHI4MM_ASSIGN_OR_RETURN(SpeechEncodeJob job, StartEncode(features, with_image, pool, tap, tap_prefix));
  PHI4MM_RETURN_IF_ERROR(job.Step(job.blocks(), pool));
  return job.Finish(pool);
}

Result<SpeechEncodeJob> SpeechModel::StartEncode(const AudioFeatures& features, bool with_image, ThreadPool* pool,
                                                 TensorTap* tap, const std::string& tap_prefix) const {
  const Weights& w = *w_;
  const AudioConfig& c = w.cfg;
  const int64_t T = features.frames, mel = c.input_size, d = c.hidden_size, ch = c.nemo_conv_channels;
  if (features.num_mel != mel)
    return InvalidArgument("audio features have " + std::to_string(features.num_mel) + " mel bins but the model's " +
                           "audio encoder takes " + std::to_string(mel));
  if (T <= 0 || static_cast<int64_t>(features.log_mel.size()) != T * mel)
    return InvalidArgument("audio features: log_mel holds " + std::to_string(features.log_mel.size()) +
                           " values, expected frames (" + std::to_string(T) + ", must be > 0) x " +
                           std::to_string(mel));
  int64_t t_enc = T;
  for (int64_t s = 0; s <= static_cast<int64_t>(w.stages.size()); ++s) t_enc = Stride2Length(t_enc);
  if (features.num_tokens <= 0 || features.num_tokens > t_enc)
    return InvalidArgument("audio features: num_tokens " + std::to_string(features.num_tokens) + " must be in [1, " +
                           std::to_string(t_enc) + "] for a clip of " + std::to_string(T) +
                           " frames (ComputeAudioFeatures sets it to ceil(frames / " +
                           std::to_string(c.time_reduction) + "))");

  // 1. Phi4MultimodalAudioMeanVarianceNormLayer: (x - global_mean) · global_invstd.   [T, mel]
  std::vector<float> x(features.log_mel);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t m = 0; m < mel; ++m) {
      float& v = x[static_cast<size_t>(t * mel + m)];
      v = (v - w.mean[static_cast<size_t>(m)]) * w.invstd[static_cast<size_t>(m)];
    }
  TapIf(tap, tap_prefix + "normalized", x.data(), {T, mel});

  // 2. Phi4MultimodalAudioNemoConvSubsampling (channels-last [time, freq, channel] here).
  int64_t th = Stride2Length(T), fw = Stride2Length(mel);
  std::vector<float> a(static_cast<size_t>(th * fw * ch));
  Conv2d3x3Stride2(x.data(), T, mel, 1, w.conv0_w.data(), w.conv0_b.data(), ch, a.data(), pool);  // conv.0
  ReluInPlace(a.data(), static_cast<int64_t>(a.size()));
  std::vector<float> b;
  for (const auto& st : w.stages) {
    const int64_t th2 = Stride2Length(th), fw2 = Stride2Length(fw);
    b.resize(static_cast<size_t>(th2 * fw2 * ch));
    DepthwiseConv2d3x3Stride2(a.data(), th, fw, ch, st.dw_w.data(), st.dw_b.data(), b.data(), pool);
    a.resize(b.size());
    st.pw.Apply(b.data(), th2 * fw2, a.data(), pool);
    ReluInPlace(a.data(), static_cast<int64_t>(a.size()));
    th = th2;
    fw = fw2;
  }
  // [T', F', C] -> [T', C·F'] with flat index channel·F' + freq (torch: transpose(1, 2).reshape).
  b.resize(static_cast<size_t>(th * ch * fw));
  for (int64_t t = 0; t < th; ++t)
    for (int64_t f = 0; f < fw; ++f)
      for (int64_t k = 0; k < ch; ++k)
        b[static_cast<size_t>((t * ch + k) * fw + f)] = a[static_cast<size_t>((t * fw + f) * ch + k)];

  // 3. Chunking (Phi4MultimodalAudioModel.forward / unfold_tensor): L = T' or 500, the sequence
  //    zero-padded to nchunks·L rows; every chunk is encoded alone, padded rows included.
  const int64_t L = std::min(t_enc, kMaxSeqLen), nchunks = (t_enc + L - 1) / L;
  std::vector<float> h(static_cast<size_t>(nchunks * L * d), 0.0f);  // [nchunks·L, D]
  w.out.Apply(b.data(), t_enc, h.data(), pool);
  TapIf(tap, tap_prefix + "subsampled", h.data(), {t_enc, d});

  // 4. T5 relative bias (Phi4MultimodalAudioRelativeAttentionBias, asymmetric): rel = j - i clamped
  //    to [-max, max-1], row rel + max of bias_values.  rel_bias: [H, 2L-1], index rel + L - 1.
  const int64_t heads = c.num_attention_heads, maxd = c.bias_max_distance;
  std::vector<float> rel_bias(static_cast<size_t>(heads * (2 * L - 1)));
  for (int64_t r = -(L - 1); r <= L - 1; ++r) {
    const int64_t row = std::clamp(r, -maxd, maxd - 1) + maxd;
    for (int64_t hh = 0; hh < heads; ++hh)
      rel_bias[static_cast<size_t>(hh * (2 * L - 1) + r + L - 1)] = w.rel_table[static_cast<size_t>(row * heads + hh)];
  }
  const std::vector<uint8_t> allowed = StreamingMask(L, c.chunk_size, c.left_chunk);

  auto st = std::make_shared<SpeechEncodeJob::State>();
  st->w = w_;
  st->with_image = with_image;
  st->num_tokens = features.num_tokens;
  st->t_enc = t_enc;
  st->L = L;
  st->nchunks = nchunks;
  st->h = std::move(h);
  st->rel_bias = std::move(rel_bias);
  st->allowed = allowed;
  st->scratch.Reserve(L, d, c.intermediate_size);
  st->tap = tap;
  st->tap_prefix = tap_prefix;
  SpeechEncodeJob job;
  job.s_ = std::move(st);
  return job;
}

// 5. Conformer blocks.
Status SpeechEncodeJob::Step(int64_t n_blocks, ThreadPool* pool) {
  State& st = *s_;
  const SpeechModel::Weights& w = *st.w;
  const AudioConfig& c = w.cfg;
  const int64_t L = st.L, d = c.hidden_size;
  ThreadPool local(1);
  if (pool == nullptr) pool = &local;
  for (int64_t b = 0; b < n_blocks && st.next_block < w.blocks.size(); ++b, ++st.next_block) {
    const size_t j = st.next_block;
    for (int64_t k = 0; k < st.nchunks; ++k)
      ConformerBlock(w.blocks[j], st.h.data() + k * L * d, L, c, st.rel_bias.data(),
                     st.allowed.empty() ? nullptr : st.allowed.data(), st.scratch, pool);
    TapIf(st.tap, st.tap_prefix + "block." + std::to_string(j), st.h.data(), {st.nchunks * L, d});
  }
  return Status::Ok();
}

Result<std::vector<float>> SpeechEncodeJob::Finish(ThreadPool* pool) {
  if (!s_ || !encoded())
    return Internal("speech encoding finished after " + std::to_string(blocks_done()) + " of " +
                    std::to_string(blocks()) + " blocks");
  State& st = *s_;
  const SpeechModel::Weights& w = *st.w;
  const AudioConfig& c = w.cfg;
  const int64_t d = c.hidden_size, t_enc = st.t_enc;
  const bool with_image = st.with_image;
  const std::vector<float>& h = st.h;
  TensorTap* tap = st.tap;
  const std::string& tap_prefix = st.tap_prefix;
  ThreadPool local(1);
  if (pool == nullptr) pool = &local;
  TapIf(tap, tap_prefix + "encoder_output", h.data(), {t_enc, d});

  // 6. Projection (Phi4MultimodalAudioEmbedding.forward): up -> erf GELU -> down, on the clip's
  //    first num_tokens frames.   [num_tokens, Ht]
  const Linear& up = with_image ? w.up_vision_speech : w.up_speech;
  const Linear& down = with_image ? w.down_vision_speech : w.down_speech;
  const int64_t n = st.num_tokens, ht = w.text_hidden;
  std::vector<float> u(static_cast<size_t>(n * ht)), y(static_cast<size_t>(n * ht));
  up.Apply(h.data(), n, u.data(), pool);
  GeluErfInPlace(u.data(), n * ht);
  down.Apply(u.data(), n, y.data(), pool);
  TapIf(tap, tap_prefix + "projection", y.data(), {n, ht});
  return y;
}

}  // namespace phi4mm
