// phi-4-mm-text.onnx: the decoder graph. Mirrors Decoder::Step (models/decoder.cc) for one
// sequence: x = inputs_embeds; per layer h = RMSNorm(x); qkv = h·Wqkvᵀ (+ LoRA); attention with
// rotary on the first rotary_dim dims of q and k (rotate_half, GroupQueryAttention
// rotary_interleaved 0); x += o; h = RMSNorm(x); x += down(silu(gate)·up); then the final norm
// and the tied lm_head on the last position only.
//
// LoRA gating (docs/onnx-export.md, design (c) of the research note): ORT GenAI feeds a phi4mm
// decoder that declares `input_ids` the step's ids (the whole expanded prompt at prefill, one id
// per decode step). chunk_v / chunk_s = "any 200010 / 200011 in this step"; the previous gates are
// the max over the past rows of KV layer `num_hidden_layers` (the mode register, V row =
// [gate_vision, gate_speech, 0...]); gate_vision = max(prev_v, chunk_v), gate_speech =
// max(prev_s, chunk_s)·(1 − gate_vision) (HF InputMode: vision whenever an image is present).
// Every LoRA'd projection adds gate_v·(x·A_vᵀ)·(s_v·B_vᵀ) + gate_s·(x·A_sᵀ)·(s_s·B_sᵀ).
#include "phi4mm/export/text_model.h"

#include <cmath>
#include <limits>

#include "phi4mm/models/rope.h"
#include "phi4mm/models/tensor_manifest.h"
#include "phi4mm/onnx/onnx_writer.h"
#include "phi4mm/tokenizer/chat_format.h"

namespace phi4mm::exporter {

namespace {

using onnx_writer::Attr;
using onnx_writer::Dim;
using onnx_writer::ElemType;
using onnx_writer::Graph;
using onnx_writer::ModelWriter;

constexpr int64_t kTensorFloat = 1, kTensorInt32 = 6;

struct Gates {
  std::string vision, speech;  // [B, 1, 1] float, empty when the adapter is absent
};

class TextBuilder {
 public:
  TextBuilder(const Checkpoint& ckpt, const ModelConfig& cfg, ModelWriter* w)
      : ckpt_(ckpt), cfg_(cfg), c_(cfg.text), w_(w), g_(w->graph()), manifest_(TensorManifest::ForConfig(cfg)) {}

  Result<TextModelInfo> Build();

 private:
  Result<std::string> Initializer(const std::string& name, std::vector<float> data, std::vector<int64_t> shape) {
    PHI4MM_RETURN_IF_ERROR(w_->AddFloat(name, data.data(), shape));
    return name;
  }
  Result<std::vector<int64_t>> ShapeOf(const std::string& name) const {
    const TensorSpec* s = manifest_.Find(name);
    if (s == nullptr) return Internal("the manifest has no tensor '" + name + "'");
    return s->shape;
  }
  Result<std::string> Vector(const std::string& name) {
    PHI4MM_ASSIGN_OR_RETURN(std::vector<int64_t> shape, ShapeOf(name));
    PHI4MM_ASSIGN_OR_RETURN(std::vector<float> v, ReadFloats(ckpt_, name, 1, shape[0], shape));
    return Initializer(name, std::move(v), {shape[0]});
  }
  Result<std::string> Linear(const std::string& x, const std::string& module);
  Status RotaryCaches();
  Status GatesAndRegister();
  std::string Rms(const std::string& x, const std::string& gamma);
  std::vector<std::string> SkipNorm(const std::string& x, const std::string& skip, const std::string& gamma);
  std::string Dims(std::vector<std::string> parts) { return g_.Op("Concat", parts, {Attr::Int("axis", 0)}); }

  const Checkpoint& ckpt_;
  const ModelConfig& cfg_;
  const TextConfig& c_;
  ModelWriter* w_;
  Graph& g_;
  TensorManifest manifest_;
  Gates gates_;
  std::string seqlens_, total_i32_, total_i64_, cos_, sin_, batch1_, seq1_;
  int64_t kv_layers_ = 0;
};

std::string TextBuilder::Rms(const std::string& x, const std::string& gamma) {
  const std::string sq = g_.Op("Mul", {x, x});
  const std::string ms = g_.Op("ReduceMean", {sq}, {Attr::Ints("axes", {-1}), Attr::Int("keepdims", 1)});
  const std::string eps = g_.ConstFloats({static_cast<float>(c_.rms_norm_eps)}, {});
  const std::string rms = g_.Op("Sqrt", {g_.Op("Add", {ms, eps})});
  return g_.Op("Mul", {g_.Op("Div", {x, rms}), gamma});
}

// SkipSimplifiedLayerNormalization: outputs {normed(x + skip), x + skip}.
std::vector<std::string> TextBuilder::SkipNorm(const std::string& x, const std::string& skip, const std::string& gamma) {
  const std::string n = w_->Fresh("skipnorm");
  const std::vector<std::string> outs = {n + "/out", "", "", n + "/sum"};
  g_.Node("SkipSimplifiedLayerNormalization", {x, skip, gamma}, 4,
          {Attr::Float("epsilon", static_cast<float>(c_.rms_norm_eps))}, onnx_writer::kMsDomain, outs);
  return {outs[0], outs[3]};
}

Result<std::string> TextBuilder::Linear(const std::string& x, const std::string& module) {
  const std::string wname = module + ".weight";
  PHI4MM_ASSIGN_OR_RETURN(std::vector<int64_t> shape, ShapeOf(wname));
  const int64_t out = shape[0], in = shape[1];
  PHI4MM_ASSIGN_OR_RETURN(std::vector<float> wt, ReadTransposed(ckpt_, wname, out, in));
  PHI4MM_ASSIGN_OR_RETURN(std::string w, Initializer(module + ".weight_T", std::move(wt), {in, out}));
  std::string y = g_.Op("MatMul", {x, w});
  for (LoraMode mode : {LoraMode::kVision, LoraMode::kSpeech}) {
    const LoraAdapterConfig& lc = mode == LoraMode::kVision ? cfg_.vision_lora : cfg_.speech_lora;
    const std::string& gate = mode == LoraMode::kVision ? gates_.vision : gates_.speech;
    if (!lc.present) continue;
    const std::string an = names::LoraA(module, mode), bn = names::LoraB(module, mode);
    PHI4MM_ASSIGN_OR_RETURN(std::vector<int64_t> ashape, ShapeOf(an));
    const int64_t r = ashape[0];
    PHI4MM_ASSIGN_OR_RETURN(std::vector<float> at, ReadTransposed(ckpt_, an, r, in));
    PHI4MM_ASSIGN_OR_RETURN(std::vector<float> bt, ReadTransposed(ckpt_, bn, out, r, static_cast<float>(lc.scale())));
    PHI4MM_ASSIGN_OR_RETURN(std::string a, Initializer(an + "_T", std::move(at), {in, r}));
    PHI4MM_ASSIGN_OR_RETURN(std::string b, Initializer(bn + "_T_scaled", std::move(bt), {r, out}));
    const std::string t = g_.Op("Mul", {g_.Op("MatMul", {x, a}), gate});
    y = g_.Op("Add", {y, g_.Op("MatMul", {t, b})});
  }
  return y;
}

// cos/sin caches [positions, rotary_dim/2], the values RotaryTables::CosSin gives the engine; with
// LongRoPE an If on total length > original_max_position_embeddings picks the long table (ORT GenAI
// builder's make_rotary_embedding_multi_cache).
Status TextBuilder::RotaryCaches() {
  const RotaryTables rope(c_);
  const int64_t half = rope.rotary_dim() / 2;
  std::vector<float> cs(static_cast<size_t>(rope.rotary_dim())), sn(cs.size());
  auto table = [&](int64_t positions, bool long_table, const std::string& tag) -> Status {
    std::vector<float> cos(static_cast<size_t>(positions * half)), sin(cos.size());
    for (int64_t p = 0; p < positions; ++p) {
      rope.CosSin(p, long_table, cs.data(), sn.data());
      std::copy_n(cs.data(), half, cos.data() + p * half);
      std::copy_n(sn.data(), half, sin.data() + p * half);
    }
    PHI4MM_RETURN_IF_ERROR(w_->AddFloat("cos_cache_" + tag, cos.data(), {positions, half}));
    return w_->AddFloat("sin_cache_" + tag, sin.data(), {positions, half});
  };
  const bool longrope = !c_.rope_short_factor.empty();
  if (!longrope) {
    PHI4MM_RETURN_IF_ERROR(table(c_.max_position_embeddings, false, "single"));
    cos_ = "cos_cache_single";
    sin_ = "sin_cache_single";
    return Status::Ok();
  }
  PHI4MM_RETURN_IF_ERROR(table(c_.original_max_position_embeddings, false, "small"));
  PHI4MM_RETURN_IF_ERROR(table(c_.max_position_embeddings, true, "large"));
  auto branch = [&](const std::string& tag) {
    auto [proto, sub] = w_->Subgraph("rotary_" + tag);
    const std::string co = sub.Op("Identity", {"cos_cache_" + tag});
    const std::string so = sub.Op("Identity", {"sin_cache_" + tag});
    sub.Output(co, ElemType::kFloat, {Dim("rotary_positions"), half});
    sub.Output(so, ElemType::kFloat, {Dim("rotary_positions"), half});
    return proto;
  };
  const std::string use_long =
      g_.Op("Greater", {total_i64_, g_.ConstInts({c_.original_max_position_embeddings}, true)});
  const std::vector<std::string> outs =
      g_.Node("If", {use_long}, 2, {Attr::Graph("then_branch", branch("large")), Attr::Graph("else_branch", branch("small"))});
  cos_ = outs[0];
  sin_ = outs[1];
  return Status::Ok();
}

Status TextBuilder::GatesAndRegister() {
  if (!cfg_.vision_lora.present && !cfg_.speech_lora.present) return Status::Ok();
  const int64_t reg = c_.num_hidden_layers, hd = c_.head_dim, nkv = c_.num_key_value_heads, nh = c_.num_attention_heads;
  auto chunk = [&](int64_t id) {
    const std::string eq = g_.Op("Equal", {kInputIds, g_.ConstInts({id}, true)});
    const std::string f = g_.Op("Cast", {eq}, {Attr::Int("to", kTensorFloat)});
    return g_.Op("ReduceMax", {f}, {Attr::Ints("axes", {1}), Attr::Int("keepdims", 0)});  // [B]
  };
  const std::string chunk_v = chunk(kImageTokenId), chunk_s = chunk(kAudioTokenId);
  // Flags of the past rows [0, P) of the register, P = total - S, plus one zero row.
  const std::string seq_i64 = g_.Op("Gather", {g_.Op("Shape", {kInputIds}), g_.ConstInts({1}, true)}, {Attr::Int("axis", 0)});
  const std::string past_len = g_.Op("Unsqueeze", {g_.Op("Sub", {total_i64_, seq_i64}), g_.ConstInts({0})});
  const std::string ends = Dims({g_.ConstInts({1}), past_len, g_.ConstInts({2})});
  const std::string past_flags =
      g_.Op("Slice", {PastValueName(reg), g_.ConstInts({0, 0, 0}), ends, g_.ConstInts({1, 2, 3})});  // [B,1,P,2]
  const std::string zero_row =
      g_.Op("Expand", {g_.ConstFloats({0, 0}, {1, 1, 1, 2}), Dims({batch1_, g_.ConstInts({1, 1, 2})})});
  const std::string flags = g_.Op("Concat", {past_flags, zero_row}, {Attr::Int("axis", 2)});
  const std::string prev = g_.Op("ReduceMax", {flags}, {Attr::Ints("axes", {1, 2}), Attr::Int("keepdims", 0)});  // [B,2]
  const std::string prev_v = g_.Op("Gather", {prev, g_.ConstInts({0}, true)}, {Attr::Int("axis", 1)});
  const std::string prev_s = g_.Op("Gather", {prev, g_.ConstInts({1}, true)}, {Attr::Int("axis", 1)});
  const std::string gv = g_.Op("Max", {prev_v, chunk_v});
  const std::string one = g_.ConstFloats({1.0f}, {});
  const std::string gs = g_.Op("Mul", {g_.Op("Max", {prev_s, chunk_s}), g_.Op("Sub", {one, gv})});
  const std::string axes12 = g_.ConstInts({1, 2});
  gates_.vision = cfg_.vision_lora.present ? g_.Op("Unsqueeze", {gv, axes12}) : "";
  gates_.speech = cfg_.speech_lora.present ? g_.Op("Unsqueeze", {gs, axes12}) : "";
  // The register's new rows: q = k = 0, v = [gate_v, gate_s, 0...] in every KV head.
  const std::string axis1 = g_.ConstInts({1});
  const std::string pair = g_.Op("Concat", {g_.Op("Unsqueeze", {gv, axis1}), g_.Op("Unsqueeze", {gs, axis1})},
                                 {Attr::Int("axis", 1)});  // [B,2]
  const std::string row = g_.Op("Pad", {pair, g_.ConstInts({0, 0, 0, hd - 2})});  // [B,hd]
  const std::string heads = g_.Op("Unsqueeze", {g_.Op("Tile", {row, g_.ConstInts({1, nkv})}), axis1});  // [B,1,nkv*hd]
  const std::string v_rows = g_.Op("Expand", {heads, Dims({batch1_, seq1_, g_.ConstInts({nkv * hd})})});
  const std::string qk = g_.Op("Expand", {g_.ConstFloats({0}, {1, 1, 1}), Dims({batch1_, seq1_, g_.ConstInts({(nh + nkv) * hd})})});
  const std::string packed = g_.Op("Concat", {qk, v_rows}, {Attr::Int("axis", 2)});
  g_.Node("GroupQueryAttention", {packed, "", "", PastKeyName(reg), PastValueName(reg), seqlens_, total_i32_}, 3,
          {Attr::Int("num_heads", nh), Attr::Int("kv_num_heads", nkv)}, onnx_writer::kMsDomain,
          {w_->Fresh("register_attention"), PresentKeyName(reg), PresentValueName(reg)});
  return Status::Ok();
}

Result<TextModelInfo> TextBuilder::Build() {
  const int64_t H = c_.hidden_size, hd = c_.head_dim, nkv = c_.num_key_value_heads, I = c_.intermediate_size;
  const bool any_lora = cfg_.vision_lora.present || cfg_.speech_lora.present;
  kv_layers_ = c_.num_hidden_layers + (any_lora ? 1 : 0);
  const std::vector<Dim> bs = {Dim("batch_size"), Dim("sequence_length")};
  g_.Input(kInputsEmbeds, ElemType::kFloat, {Dim("batch_size"), Dim("sequence_length"), H});
  g_.Input(kAttentionMask, ElemType::kInt64, {Dim("batch_size"), Dim("total_sequence_length")});
  if (any_lora) g_.Input(kInputIds, ElemType::kInt64, bs);
  for (int64_t l = 0; l < kv_layers_; ++l) {
    const std::vector<Dim> past = {Dim("batch_size"), nkv, Dim("past_sequence_length"), hd};
    g_.Input(PastKeyName(l), ElemType::kFloat, past);
    g_.Input(PastValueName(l), ElemType::kFloat, past);
  }
  g_.Output(kLogits, ElemType::kFloat, {Dim("batch_size"), int64_t{1}, c_.vocab_size});
  for (int64_t l = 0; l < kv_layers_; ++l) {
    const std::vector<Dim> present = {Dim("batch_size"), nkv, Dim("total_sequence_length"), hd};
    g_.Output(PresentKeyName(l), ElemType::kFloat, present);
    g_.Output(PresentValueName(l), ElemType::kFloat, present);
  }

  // Sequence bookkeeping as ORT GenAI's builder computes it.
  const std::string mask_shape = g_.Op("Shape", {kAttentionMask});
  total_i64_ = g_.Op("Gather", {mask_shape, g_.ConstInts({1}, true)}, {Attr::Int("axis", 0)});
  total_i32_ = g_.Op("Cast", {total_i64_}, {Attr::Int("to", kTensorInt32)});
  const std::string sum = g_.Op("ReduceSum", {kAttentionMask, g_.ConstInts({1})}, {Attr::Int("keepdims", 0)});
  seqlens_ = g_.Op("Cast", {g_.Op("Sub", {sum, g_.ConstInts({1}, true)})}, {Attr::Int("to", kTensorInt32)});
  const std::string embeds_shape = g_.Op("Shape", {kInputsEmbeds});
  batch1_ = g_.Op("Slice", {embeds_shape, g_.ConstInts({0}), g_.ConstInts({1})});
  seq1_ = g_.Op("Slice", {embeds_shape, g_.ConstInts({1}), g_.ConstInts({2})});
  PHI4MM_RETURN_IF_ERROR(RotaryCaches());
  PHI4MM_RETURN_IF_ERROR(GatesAndRegister());

  std::string x = kInputsEmbeds, mlp_out;
  for (int64_t l = 0; l < c_.num_hidden_layers; ++l) {
    const std::string p = names::DecoderLayer(l);
    PHI4MM_ASSIGN_OR_RETURN(std::string in_norm, Vector(p + "input_layernorm.weight"));
    PHI4MM_ASSIGN_OR_RETURN(std::string post_norm, Vector(p + "post_attention_layernorm.weight"));
    std::string h;
    if (l == 0) {
      h = Rms(x, in_norm);
    } else {
      const std::vector<std::string> n = SkipNorm(mlp_out, x, in_norm);
      h = n[0];
      x = n[1];
    }
    PHI4MM_ASSIGN_OR_RETURN(std::string qkv, Linear(h, p + "self_attn.qkv_proj"));
    const std::string attn = g_.Node(
        "GroupQueryAttention", {qkv, "", "", PastKeyName(l), PastValueName(l), seqlens_, total_i32_, cos_, sin_}, 3,
        {Attr::Int("num_heads", c_.num_attention_heads), Attr::Int("kv_num_heads", nkv), Attr::Int("do_rotary", 1),
         Attr::Int("rotary_interleaved", 0), Attr::Float("scale", 1.0f / std::sqrt(static_cast<float>(hd)))},
        onnx_writer::kMsDomain, {w_->Fresh("attention"), PresentKeyName(l), PresentValueName(l)})[0];
    PHI4MM_ASSIGN_OR_RETURN(std::string o, Linear(attn, p + "self_attn.o_proj"));
    const std::vector<std::string> n2 = SkipNorm(o, x, post_norm);
    x = n2[1];
    PHI4MM_ASSIGN_OR_RETURN(std::string gu, Linear(n2[0], p + "mlp.gate_up_proj"));
    const std::vector<std::string> parts =
        g_.Node("Split", {gu, g_.ConstInts({I, I})}, 2, {Attr::Int("axis", -1)});
    const std::string act = g_.Op("Mul", {g_.Op("Mul", {parts[0], g_.Op("Sigmoid", {parts[0]})}), parts[1]});
    PHI4MM_ASSIGN_OR_RETURN(mlp_out, Linear(act, p + "mlp.down_proj"));
  }
  // Last position only: ORT GenAI treats logits with a static 1 as the sequence dim as pruned.
  auto last = [&](const std::string& v) {
    return g_.Op("Slice", {v, g_.ConstInts({-1}), g_.ConstInts({std::numeric_limits<int64_t>::max()}), g_.ConstInts({1})});
  };
  PHI4MM_ASSIGN_OR_RETURN(std::string final_norm, Vector(names::kFinalNorm));
  const std::string normed = c_.num_hidden_layers > 0 ? SkipNorm(last(mlp_out), last(x), final_norm)[0]
                                                      : Rms(last(x), final_norm);
  const std::string head_name = c_.tie_word_embeddings ? names::kEmbedTokens : names::kLmHead;
  PHI4MM_ASSIGN_OR_RETURN(std::vector<float> head, ReadTransposed(ckpt_, head_name, c_.vocab_size, H));
  PHI4MM_ASSIGN_OR_RETURN(std::string lm, Initializer("lm_head.weight_T", std::move(head), {H, c_.vocab_size}));
  g_.Node("MatMul", {normed, lm}, 1, {}, "", {kLogits});
  TextModelInfo info;
  info.kv_layers = kv_layers_;
  return info;
}

}  // namespace

Result<TextModelInfo> WriteTextModel(const Checkpoint& ckpt, const ModelConfig& cfg, const std::string& out_dir,
                                     const ExportOptions& opts) {
  PHI4MM_RETURN_IF_ERROR(opts.Validate());
  if (cfg.text.head_dim < 3 || cfg.text.rotary_dim() % 2 != 0)
    return Unsupported("the decoder's head_dim " + std::to_string(cfg.text.head_dim) + " / rotary_dim " +
                       std::to_string(cfg.text.rotary_dim()) + " cannot be exported");
  PHI4MM_ASSIGN_OR_RETURN(std::unique_ptr<ModelWriter> w, ModelWriter::Create(out_dir, kTextFile, "phi-4-mm-text"));
  TextBuilder b(ckpt, cfg, w.get());
  PHI4MM_ASSIGN_OR_RETURN(TextModelInfo info, b.Build());
  PHI4MM_RETURN_IF_ERROR(w->Save());
  info.external_bytes = w->external_bytes();
  return info;
}

}  // namespace phi4mm::exporter
