// phi-4-mm-speech.onnx. Mirrors SpeechModel::StartEncode / SpeechEncodeJob::Step / Finish
// (models/speech.cc) for each clip in a Loop body:
//  * frames = Σ audio_attention_mask; x = (log_mel - global_mean)·global_invstd;
//  * conv.0 (3x3, stride 2, pad 1) + ReLU, then per stage a depthwise 3x3 stride-2 conv, a 1x1 conv
//    and ReLU; [T', C, F'] flattened to [T', C·F'] and `embed.out`;
//  * zero-padded (no bias) to nchunks·L rows, L = min(T', 500), and encoded as nchunks sequences;
//  * every Conformer block: x += ½·FF(x); x += Attn(LN(x)) with the T5 bias
//    table[clamp(j − i, −max, max − 1) + max]; x += Conv(x) (GLU with b1/b2, causal depthwise conv,
//    pointwise, swish, pointwise); x += ½·FF(x); LN;
//  * the first audio_sizes[i] rows through up → erf GELU → down of the projection
//    `audio_projection_mode` picks (vision-speech for 1 and 3, speech for 0 and 2).
// Only the released configuration (chunk_size ≤ 0: no streaming mask) is exported.
#include "phi4mm/export/speech_model.h"

#include <cmath>

#include "phi4mm/models/tensor_manifest.h"
#include "phi4mm/onnx/onnx_writer.h"

namespace phi4mm::exporter {

namespace {

using onnx_writer::Attr;
using onnx_writer::Dim;
using onnx_writer::ElemType;
using onnx_writer::Graph;
using onnx_writer::ModelWriter;

constexpr int64_t kTensorInt64 = 7;
constexpr int64_t kMaxSeqLen = 500;  // Phi4MultimodalAudioModel.forward max_seq_len
constexpr float kLayerNormEps = 1e-5f;

class SpeechBuilder {
 public:
  SpeechBuilder(const Checkpoint& ckpt, const ModelConfig& cfg, ModelWriter* w)
      : ckpt_(ckpt), cfg_(cfg), c_(cfg.audio), w_(w) {}
  Status Build();

 private:
  Result<std::string> Floats(const std::string& name, const std::vector<int64_t>& shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    PHI4MM_ASSIGN_OR_RETURN(std::vector<float> v, ReadFloats(ckpt_, name, 1, n, shape));
    PHI4MM_RETURN_IF_ERROR(w_->AddReal(name, v.data(), shape));
    return name;
  }
  // y = x·Wᵀ + b for `base`.weight stored as `shape` ([out, in] or [out, in, 1(, 1)]).
  Result<std::string> Linear(Graph& g, const std::string& x, const std::string& base, std::vector<int64_t> shape) {
    const int64_t out = shape[0];
    int64_t in = 1;
    for (size_t i = 1; i < shape.size(); ++i) in *= shape[i];
    PHI4MM_ASSIGN_OR_RETURN(std::vector<float> wt, ReadTransposed(ckpt_, base + ".weight", out, in, 1.0f, shape));
    PHI4MM_RETURN_IF_ERROR(w_->AddReal(base + ".weight_T", wt.data(), {in, out}));
    PHI4MM_ASSIGN_OR_RETURN(std::string b, Floats(base + ".bias", {out}));
    return g.Op("Add", {g.Op("MatMul", {x, base + ".weight_T"}), b});
  }
  Result<std::string> LayerNorm(Graph& g, const std::string& x, const std::string& base) {
    const int64_t d = c_.hidden_size;
    PHI4MM_ASSIGN_OR_RETURN(std::string w, Floats(base + ".weight", {d}));
    PHI4MM_ASSIGN_OR_RETURN(std::string b, Floats(base + ".bias", {d}));
    return g.Op("LayerNormalization", {x, w, b}, {Attr::Int("axis", -1), Attr::Float("epsilon", kLayerNormEps)});
  }
  std::string Swish(Graph& g, const std::string& x) { return g.Op("Mul", {x, g.Op("Sigmoid", {x})}); }
  // value·swish(gate) over x [.., 2d] = [value | gate].
  std::string GatedSwish(Graph& g, const std::string& x, int64_t d, const std::string& vb = "",
                         const std::string& gb = "") {
    const std::vector<std::string> parts = g.Node("Split", {x, g.ConstInts({d, d})}, 2, {Attr::Int("axis", -1)});
    const std::string value = vb.empty() ? parts[0] : g.Op("Add", {parts[0], vb});
    const std::string gate = gb.empty() ? parts[1] : g.Op("Add", {parts[1], gb});
    return g.Op("Mul", {value, Swish(g, gate)});
  }
  Result<std::string> HalfFeedForward(Graph& g, const std::string& x, const std::string& p);
  Result<std::string> Block(Graph& g, const std::string& x, const std::string& bias, int64_t j);
  Result<std::string> ClipBody(Graph& g, const std::string& i);

  const Checkpoint& ckpt_;
  const ModelConfig& cfg_;
  const AudioConfig& c_;
  ModelWriter* w_;
};

Result<std::string> SpeechBuilder::HalfFeedForward(Graph& g, const std::string& x, const std::string& p) {
  const int64_t d = c_.hidden_size, inner = c_.intermediate_size;
  PHI4MM_ASSIGN_OR_RETURN(std::string n, LayerNorm(g, x, p + "layer_norm"));
  PHI4MM_ASSIGN_OR_RETURN(std::string gu, Linear(g, n, p + "gate_up_proj", {2 * inner, d}));
  PHI4MM_ASSIGN_OR_RETURN(std::string down, Linear(g, GatedSwish(g, gu, inner), p + "down_proj", {d, inner}));
  return g.Op("Add", {x, g.Op("Mul", {down, g.ConstReal({0.5f}, {})})});
}

Result<std::string> SpeechBuilder::Block(Graph& g, const std::string& x0, const std::string& bias, int64_t j) {
  const int64_t d = c_.hidden_size, nh = c_.num_attention_heads, hd = d / nh, K = c_.kernel_size;
  const std::string p = std::string(names::kSpeechPrefix) + "encoder.encoders." + std::to_string(j) + ".";
  PHI4MM_ASSIGN_OR_RETURN(std::string x, HalfFeedForward(g, x0, p + "feed_forward_in."));
  // Self-attention with the relative bias [1, H, L, L].
  PHI4MM_ASSIGN_OR_RETURN(std::string n, LayerNorm(g, x, p + "layer_norm_att"));
  const std::string heads = g.ConstInts({0, 0, nh, hd});
  auto proj = [&](const char* name, std::vector<int64_t> perm) -> Result<std::string> {
    PHI4MM_ASSIGN_OR_RETURN(std::string y, Linear(g, n, p + "self_attn." + name, {d, d}));
    return g.Op("Transpose", {g.Op("Reshape", {y, heads})}, {Attr::Ints("perm", std::move(perm))});
  };
  PHI4MM_ASSIGN_OR_RETURN(std::string q, proj("q_proj", {0, 2, 1, 3}));
  PHI4MM_ASSIGN_OR_RETURN(std::string k, proj("k_proj", {0, 2, 3, 1}));
  PHI4MM_ASSIGN_OR_RETURN(std::string v, proj("v_proj", {0, 2, 1, 3}));
  const std::string scale = g.ConstReal({static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)))}, {});
  const std::string scores = g.Op("Add", {g.Op("Mul", {g.Op("MatMul", {q, k}), scale}), bias});
  const std::string att = g.Op("MatMul", {g.Op("Softmax", {scores}, {Attr::Int("axis", -1)}), v});
  const std::string merged =
      g.Op("Reshape", {g.Op("Transpose", {att}, {Attr::Ints("perm", {0, 2, 1, 3})}), g.ConstInts({0, 0, d})});
  PHI4MM_ASSIGN_OR_RETURN(std::string o, Linear(g, merged, p + "self_attn.o_proj", {d, d}));
  x = g.Op("Add", {x, o});
  // Convolution module.
  PHI4MM_ASSIGN_OR_RETURN(std::string cn, LayerNorm(g, x, p + "conv.layer_norm"));
  PHI4MM_ASSIGN_OR_RETURN(std::string glu, Linear(g, cn, p + "conv.glu.ext_pw_conv_1d", {2 * d, d, 1}));
  PHI4MM_ASSIGN_OR_RETURN(std::vector<float> b1, ReadFloats(ckpt_, p + "conv.glu.b1", 1, d, {1, d, 1}));
  PHI4MM_ASSIGN_OR_RETURN(std::vector<float> b2, ReadFloats(ckpt_, p + "conv.glu.b2", 1, d, {1, d, 1}));
  PHI4MM_RETURN_IF_ERROR(w_->AddReal(p + "conv.glu.b1", b1.data(), {d}));
  PHI4MM_RETURN_IF_ERROR(w_->AddReal(p + "conv.glu.b2", b2.data(), {d}));
  const std::string gated = GatedSwish(g, glu, d, p + "conv.glu.b1", p + "conv.glu.b2");  // [n, L, D]
  PHI4MM_ASSIGN_OR_RETURN(std::string dw_w, Floats(p + "conv.dw_sep_conv_1d.dw_conv.weight", {d, 1, K}));
  PHI4MM_ASSIGN_OR_RETURN(std::string dw_b, Floats(p + "conv.dw_sep_conv_1d.dw_conv.bias", {d}));
  const std::string chw = g.Op("Transpose", {gated}, {Attr::Ints("perm", {0, 2, 1})});  // [n, D, L]
  const std::string dw = g.Op("Conv", {chw, dw_w, dw_b},
                              {Attr::Ints("kernel_shape", {K}), Attr::Int("group", d), Attr::Ints("pads", {K - 1, 0})});
  const std::string dwt = g.Op("Transpose", {dw}, {Attr::Ints("perm", {0, 2, 1})});
  PHI4MM_ASSIGN_OR_RETURN(std::string pw, Linear(g, dwt, p + "conv.dw_sep_conv_1d.pw_conv", {d, d, 1}));
  PHI4MM_ASSIGN_OR_RETURN(std::string ext, Linear(g, Swish(g, pw), p + "conv.ext_pw_conv_1d", {d, d, 1}));
  x = g.Op("Add", {x, ext});
  PHI4MM_ASSIGN_OR_RETURN(x, HalfFeedForward(g, x, p + "feed_forward_out."));
  return LayerNorm(g, x, p + "layer_norm");
}

Result<std::string> SpeechBuilder::ClipBody(Graph& g, const std::string& i) {
  const int64_t d = c_.hidden_size, ch = c_.nemo_conv_channels, mel = c_.input_size, T = cfg_.text.hidden_size;
  const int64_t nh = c_.num_attention_heads, maxd = c_.bias_max_distance;
  const std::string a = names::kSpeechPrefix, e = a + "encoder.";
  const std::string axis0 = g.ConstInts({0}), one = g.ConstInts({1}, true);
  const std::string valid = g.Op("Cast", {g.Op("Gather", {"audio_attention_mask", i}, {Attr::Int("axis", 0)})},
                                 {Attr::Int("to", kTensorInt64)});
  const std::string frames1 = g.Op("ReduceSum", {valid, axis0}, {Attr::Int("keepdims", 1)});  // [1]
  const std::string logmel =
      g.Op("Slice", {g.Op("Gather", {"audio_embeds", i}, {Attr::Int("axis", 0)}), axis0, frames1, axis0});
  PHI4MM_ASSIGN_OR_RETURN(std::string mean, Floats(e + "encoder_embedding.global_mean", {mel}));
  PHI4MM_ASSIGN_OR_RETURN(std::string invstd, Floats(e + "encoder_embedding.global_invstd", {mel}));
  const std::string norm = g.Op("Mul", {g.Op("Sub", {logmel, mean}), invstd});
  std::string x = g.Op("Unsqueeze", {norm, g.ConstInts({0, 1})});  // [1, 1, T, mel]
  const std::vector<Attr> s2 = {Attr::Ints("kernel_shape", {3, 3}), Attr::Ints("strides", {2, 2}),
                                Attr::Ints("pads", {1, 1, 1, 1})};
  PHI4MM_ASSIGN_OR_RETURN(std::string w0, Floats(e + "embed.conv.0.weight", {ch, 1, 3, 3}));
  PHI4MM_ASSIGN_OR_RETURN(std::string b0, Floats(e + "embed.conv.0.bias", {ch}));
  x = g.Op("Relu", {g.Op("Conv", {x, w0, b0}, s2)});
  int64_t sampling = 0;
  while ((int64_t{2} << sampling) <= c_.time_reduction) ++sampling;
  int64_t freq = (mel - 1) / 2 + 1;
  for (int64_t s = 1; s < sampling; ++s) {
    const std::string dw = e + "embed.conv." + std::to_string(3 * s - 1), pw = e + "embed.conv." + std::to_string(3 * s);
    PHI4MM_ASSIGN_OR_RETURN(std::string dww, Floats(dw + ".weight", {ch, 1, 3, 3}));
    PHI4MM_ASSIGN_OR_RETURN(std::string dwb, Floats(dw + ".bias", {ch}));
    PHI4MM_ASSIGN_OR_RETURN(std::string pww, Floats(pw + ".weight", {ch, ch, 1, 1}));
    PHI4MM_ASSIGN_OR_RETURN(std::string pwb, Floats(pw + ".bias", {ch}));
    std::vector<Attr> dwa = s2;
    dwa.push_back(Attr::Int("group", ch));
    x = g.Op("Relu", {g.Op("Conv", {g.Op("Conv", {x, dww, dwb}, dwa), pww, pwb}, {Attr::Ints("kernel_shape", {1, 1})})});
    freq = (freq - 1) / 2 + 1;
  }
  // [1, C, T', F'] -> [T', C·F'] -> embed.out [T', D].
  const std::string flat = g.Op("Reshape", {g.Op("Transpose", {x}, {Attr::Ints("perm", {0, 2, 1, 3})}),
                                            g.ConstInts({-1, ch * freq})});
  PHI4MM_ASSIGN_OR_RETURN(std::string h, Linear(g, flat, e + "embed.out", {d, ch * freq}));
  // Chunks of L = min(T', 500) rows, the last zero-padded.
  const std::string t_enc = g.Op("Gather", {g.Op("Shape", {h}), g.ConstInts({0}, true)}, {Attr::Int("axis", 0)});
  const std::string L = g.Op("Min", {t_enc, g.ConstInts({kMaxSeqLen}, true)});
  const std::string nchunks = g.Op("Div", {g.Op("Sub", {g.Op("Add", {t_enc, L}), one}), L});
  const std::string pad = g.Op("Sub", {g.Op("Mul", {nchunks, L}), t_enc});
  const std::string pads = g.Op("Concat", {g.ConstInts({0, 0}), g.Op("Unsqueeze", {pad, axis0}), g.ConstInts({0})},
                                {Attr::Int("axis", 0)});
  const std::string chunks = g.Op("Reshape", {g.Op("Pad", {h, pads}),
                                              g.Op("Concat", {g.Op("Unsqueeze", {nchunks, axis0}),
                                                              g.Op("Unsqueeze", {L, axis0}), g.ConstInts({d})},
                                                   {Attr::Int("axis", 0)})});
  // T5 bias [1, H, L, L] from table [2·max, H].
  PHI4MM_ASSIGN_OR_RETURN(std::string table, Floats(e + "relative_attention_bias_layer.bias_values.weight", {2 * maxd, nh}));
  const std::string pos = g.Op("Range", {g.ConstInts({0}, true), L, one});
  const std::string rel = g.Op("Sub", {g.Op("Unsqueeze", {pos, axis0}), g.Op("Unsqueeze", {pos, g.ConstInts({1})})});  // j - i
  const std::string row = g.Op("Add", {g.Op("Clip", {rel, g.ConstInts({-maxd}, true), g.ConstInts({maxd - 1}, true)}),
                                       g.ConstInts({maxd}, true)});
  const std::string bias = g.Op("Unsqueeze", {g.Op("Transpose", {g.Op("Gather", {table, row}, {Attr::Int("axis", 0)})},
                                                   {Attr::Ints("perm", {2, 0, 1})}),
                                              axis0});
  std::string y = chunks;
  for (int64_t j = 0; j < c_.num_blocks; ++j) {
    PHI4MM_ASSIGN_OR_RETURN(y, Block(g, y, bias, j));
  }
  // First audio_sizes[i] rows, then the projection the mode selects.
  const std::string ntok = g.Op("Unsqueeze", {g.Op("Gather", {"audio_sizes", i}, {Attr::Int("axis", 0)}), axis0});
  const std::string rows = g.Op("Slice", {g.Op("Reshape", {y, g.ConstInts({-1, d})}), axis0, ntok, axis0});
  auto projection = [&](const std::string& kind) -> Result<std::string> {
    PHI4MM_ASSIGN_OR_RETURN(std::string up, Linear(g, rows, a + "up_proj_for_" + kind, {T, d}));
    const std::string gelu = g.Op("Mul", {g.Op("Mul", {up, g.ConstReal({0.5f}, {})}),
                                          g.Op("Add", {g.Op("Erf", {g.Op("Mul", {up, g.ConstReal({0.70710678118654752f}, {})})}),
                                                       g.ConstReal({1.0f}, {})})});
    return Linear(g, gelu, a + "down_proj_for_" + kind, {T, T});
  };
  PHI4MM_ASSIGN_OR_RETURN(std::string speech, projection("speech"));
  PHI4MM_ASSIGN_OR_RETURN(std::string vision_speech, projection("vision_speech"));
  const std::string mode = "audio_projection_mode";
  const std::string with_image = g.Op("Or", {g.Op("Equal", {mode, g.ConstInts({1}, true)}),
                                             g.Op("Equal", {mode, g.ConstInts({3}, true)})});  // [1]
  return g.Op("Where", {g.Op("Unsqueeze", {with_image, axis0}), vision_speech, speech});
}

Status SpeechBuilder::Build() {
  const int64_t T = cfg_.text.hidden_size;
  Graph& g = w_->graph();
  g.Input("audio_embeds", w_->real_type(), {Dim("num_audios"), Dim("num_frames"), c_.input_size});
  g.Input("audio_attention_mask", ElemType::kBool, {Dim("num_audios"), Dim("num_frames")});
  g.Input("audio_sizes", ElemType::kInt64, {Dim("num_audios")});
  g.Input("audio_projection_mode", ElemType::kInt64, {int64_t{1}});
  g.Output(kAudioFeatures, w_->real_type(), {Dim("num_audio_tokens"), T});
  return AddConcatLoop(w_, "clip", "audio_embeds", T, kAudioFeatures,
                       [&](Graph& body, const std::string& index) { return ClipBody(body, index); });
}

}  // namespace

Result<uint64_t> WriteSpeechModel(const Checkpoint& ckpt, const ModelConfig& cfg, const std::string& out_dir,
                                  const ExportOptions& opts) {
  PHI4MM_RETURN_IF_ERROR(opts.Validate());
  const AudioConfig& c = cfg.audio;
  if (c.chunk_size > 0)
    return Unsupported("audio chunk_size " + std::to_string(c.chunk_size) +
                       " (a streaming attention mask) cannot be exported; the released model has -1");
  if (c.num_attention_heads <= 0 || c.hidden_size % c.num_attention_heads != 0 || c.time_reduction < 2)
    return Unsupported("the audio encoder's configuration cannot be exported");
  PHI4MM_ASSIGN_OR_RETURN(std::unique_ptr<ModelWriter> w,
                          ModelWriter::Create(out_dir, kSpeechFile, "phi-4-mm-speech", opts.RealType()));
  SpeechBuilder b(ckpt, cfg, w.get());
  PHI4MM_RETURN_IF_ERROR(b.Build());
  PHI4MM_RETURN_IF_ERROR(w->Save());
  return w->external_bytes();
}

}  // namespace phi4mm::exporter
