// phi-4-mm-text.onnx: the decoder graph. Mirrors Decoder::Step (models/decoder.cc) for one
// sequence: x = inputs_embeds; per layer h = RMSNorm(x); qkv = h·Wqkvᵀ (+ LoRA); attention with
// rotary on the first rotary_dim dims of q and k (rotate_half, GroupQueryAttention
// rotary_interleaved 0); x += o; h = RMSNorm(x); x += down(silu(gate)·up); then the final norm
// and the tied lm_head on the last position only. Weights are float32 or float16 MatMuls, or for
// --precision int4 MatMulNBits: 4 bits for the layers' linears, 8 bits for the lm_head and the
// adapters (the engine's q4 policy), ORT's block-32 symmetric rounding (matmul_nbits.h).
//
// LoRA gating (docs/onnx-export.md, design (c) of the research note): ORT GenAI feeds a phi4mm
// decoder that declares `input_ids` the step's ids (the whole expanded prompt at prefill, one id
// per decode step). chunk_v / chunk_s = "any 200010 / 200011 in this step"; the previous gates are
// the max over the past rows of KV layer `num_hidden_layers` (the mode register, V row =
// [gate_vision, gate_speech, 0...]); gate_vision = max(prev_v, chunk_v), gate_speech =
// max(prev_s, chunk_s)·(1 − gate_vision) (HF InputMode: vision whenever an image is present).
// Every LoRA'd projection adds gate_v·(x·A_vᵀ)·(s_v·B_vᵀ) + gate_s·(x·A_sᵀ)·(s_s·B_sᵀ): with
// --lora sum both terms are always computed; with --lora if each sits in an If on "any row of
// the batch has this gate", so a step reads only the adapter it uses (design c′).
#include "phi4mm/export/text_model.h"

#include <cmath>
#include <limits>

#include "phi4mm/export/matmul_nbits.h"
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

constexpr int64_t kTensorInt32 = 6;
constexpr int kNBitsBlock = 32;

struct Gates {
  std::string vision, speech;            // [B, 1, 1] real, empty when the adapter is absent
  std::string vision_any, speech_any;    // bool scalars: some row has the gate (the If variant)
};

class TextBuilder {
 public:
  TextBuilder(const Checkpoint& ckpt, const ModelConfig& cfg, const ExportOptions& opts, ModelWriter* w)
      : ckpt_(ckpt),
        cfg_(cfg),
        c_(cfg.text),
        opts_(opts),
        w_(w),
        g_(w->graph()),
        manifest_(TensorManifest::ForConfig(cfg)) {}

  Result<TextModelInfo> Build();

 private:
  Result<std::string> Initializer(const std::string& name, std::vector<float> data, std::vector<int64_t> shape) {
    PHI4MM_RETURN_IF_ERROR(w_->AddReal(name, data.data(), shape));
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
  // x·Wᵀ in `g` for the weight `name` given as [n, k] (the checkpoint's [out, in]): a MatMul on
  // its transpose in the real type (bits 0), or MatMulNBits with `bits`.
  Result<std::string> Product(Graph& g, const std::string& x, const std::string& name, std::vector<float> w, int64_t n,
                              int64_t k, int bits);
  // gate·(x·Aᵀ)·(s·Bᵀ) of one adapter on module, in `g`.
  Result<std::string> LoraDelta(Graph& g, const std::string& x, const std::string& module, LoraMode mode, int64_t out,
                                int64_t in);
  Result<std::string> Linear(const std::string& x, const std::string& module);
  bool Gated() const {
    return opts_.lora != "none" && (cfg_.vision_lora.present || cfg_.speech_lora.present);
  }
  Status RotaryCaches();
  Status GatesAndRegister();
  std::string Rms(const std::string& x, const std::string& gamma);
  std::vector<std::string> SkipNorm(const std::string& x, const std::string& skip, const std::string& gamma);
  std::string Dims(std::vector<std::string> parts) { return g_.Op("Concat", parts, {Attr::Int("axis", 0)}); }

  const Checkpoint& ckpt_;
  const ModelConfig& cfg_;
  const TextConfig& c_;
  const ExportOptions& opts_;
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
  const std::string eps = g_.ConstReal({static_cast<float>(c_.rms_norm_eps)}, {});
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

Result<std::string> TextBuilder::Product(Graph& g, const std::string& x, const std::string& name,
                                         std::vector<float> w, int64_t n, int64_t k, int bits) {
  if (bits == 0) {
    std::vector<float> t(w.size());
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < k; ++c) t[static_cast<size_t>(c * n + r)] = w[static_cast<size_t>(r * k + c)];
    w = {};
    PHI4MM_ASSIGN_OR_RETURN(std::string wt, Initializer(name + "_T", std::move(t), {k, n}));
    return g.Op("MatMul", {x, wt});
  }
  const NBitsMatrix q = QuantizeNBits(w.data(), n, k, bits, kNBitsBlock);
  w = {};
  const int64_t kb = q.k_blocks(), blob = kNBitsBlock * bits / 8;
  const std::string b = name + "_Q" + std::to_string(bits), s = name + "_scales";
  PHI4MM_RETURN_IF_ERROR(
      w_->AddBytes(b, onnx_writer::ElemType::kUint8, q.packed.data(), q.packed.size(), {n, kb, blob}));
  PHI4MM_RETURN_IF_ERROR(w_->AddReal(s, q.scales.data(), {n * kb}));
  return g.Op("MatMulNBits", {x, b, s},
              {Attr::Int("K", k), Attr::Int("N", n), Attr::Int("bits", bits), Attr::Int("block_size", kNBitsBlock),
               Attr::Int("accuracy_level", opts_.AccuracyLevel())},
              onnx_writer::kMsDomain);
}

Result<std::string> TextBuilder::LoraDelta(Graph& g, const std::string& x, const std::string& module, LoraMode mode,
                                           int64_t out, int64_t in) {
  const LoraAdapterConfig& lc = mode == LoraMode::kVision ? cfg_.vision_lora : cfg_.speech_lora;
  const std::string& gate = mode == LoraMode::kVision ? gates_.vision : gates_.speech;
  const std::string an = names::LoraA(module, mode), bn = names::LoraB(module, mode);
  PHI4MM_ASSIGN_OR_RETURN(std::vector<int64_t> ashape, ShapeOf(an));
  const int64_t r = ashape[0];
  const int bits = opts_.Int4() ? 8 : 0;
  PHI4MM_ASSIGN_OR_RETURN(std::vector<float> a, ReadFloats(ckpt_, an, r, in));
  PHI4MM_ASSIGN_OR_RETURN(std::vector<float> b, ReadFloats(ckpt_, bn, out, r));
  for (float& v : b) v *= static_cast<float>(lc.scale());
  PHI4MM_ASSIGN_OR_RETURN(std::string xa, Product(g, x, an, std::move(a), r, in, bits));
  return Product(g, g.Op("Mul", {xa, gate}), bn + "_scaled", std::move(b), out, r, bits);
}

Result<std::string> TextBuilder::Linear(const std::string& x, const std::string& module) {
  const std::string wname = module + ".weight";
  PHI4MM_ASSIGN_OR_RETURN(std::vector<int64_t> shape, ShapeOf(wname));
  const int64_t out = shape[0], in = shape[1];
  PHI4MM_ASSIGN_OR_RETURN(std::vector<float> w, ReadFloats(ckpt_, wname, out, in));
  PHI4MM_ASSIGN_OR_RETURN(std::string y, Product(g_, x, module + ".weight", std::move(w), out, in, opts_.Int4() ? 4 : 0));
  if (!Gated()) return y;
  for (LoraMode mode : {LoraMode::kVision, LoraMode::kSpeech}) {
    if (!(mode == LoraMode::kVision ? cfg_.vision_lora : cfg_.speech_lora).present) continue;
    if (opts_.lora == "sum") {
      PHI4MM_ASSIGN_OR_RETURN(std::string d, LoraDelta(g_, x, module, mode, out, in));
      y = g_.Op("Add", {y, d});
      continue;
    }
    // If variant: then = y + delta, else = y; the branches read x, y, the gate and the adapter's
    // initializers from the outer scope.
    const std::vector<Dim> dims = {Dim("batch_size"), Dim("sequence_length"), out};
    auto [then_proto, then_g] = w_->Subgraph("lora_" + std::string(LoraModeName(mode)));
    PHI4MM_ASSIGN_OR_RETURN(std::string d, LoraDelta(then_g, x, module, mode, out, in));
    then_g.Output(then_g.Op("Add", {y, d}), w_->real_type(), dims);
    auto [else_proto, else_g] = w_->Subgraph("no_lora");
    else_g.Output(else_g.Op("Identity", {y}), w_->real_type(), dims);
    const std::string& cond = mode == LoraMode::kVision ? gates_.vision_any : gates_.speech_any;
    y = g_.Op("If", {cond}, {Attr::Graph("then_branch", then_proto), Attr::Graph("else_branch", else_proto)});
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
    PHI4MM_RETURN_IF_ERROR(w_->AddReal("cos_cache_" + tag, cos.data(), {positions, half}));
    return w_->AddReal("sin_cache_" + tag, sin.data(), {positions, half});
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
    sub.Output(co, w_->real_type(), {Dim("rotary_positions"), half});
    sub.Output(so, w_->real_type(), {Dim("rotary_positions"), half});
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
  if (!Gated()) return Status::Ok();
  const int64_t reg = c_.num_hidden_layers, hd = c_.head_dim, nkv = c_.num_key_value_heads, nh = c_.num_attention_heads;
  auto chunk = [&](int64_t id) {
    const std::string eq = g_.Op("Equal", {kInputIds, g_.ConstInts({id}, true)});
    const std::string f = g_.Op("Cast", {eq}, {Attr::Int("to", onnx_writer::TensorTypeId(w_->real_type()))});
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
      g_.Op("Expand", {g_.ConstReal({0, 0}, {1, 1, 1, 2}), Dims({batch1_, g_.ConstInts({1, 1, 2})})});
  const std::string flags = g_.Op("Concat", {past_flags, zero_row}, {Attr::Int("axis", 2)});
  const std::string prev = g_.Op("ReduceMax", {flags}, {Attr::Ints("axes", {1, 2}), Attr::Int("keepdims", 0)});  // [B,2]
  const std::string prev_v = g_.Op("Gather", {prev, g_.ConstInts({0}, true)}, {Attr::Int("axis", 1)});
  const std::string prev_s = g_.Op("Gather", {prev, g_.ConstInts({1}, true)}, {Attr::Int("axis", 1)});
  const std::string gv = g_.Op("Max", {prev_v, chunk_v});
  const std::string one = g_.ConstReal({1.0f}, {});
  const std::string gs = g_.Op("Mul", {g_.Op("Max", {prev_s, chunk_s}), g_.Op("Sub", {one, gv})});
  const std::string axes12 = g_.ConstInts({1, 2});
  gates_.vision = cfg_.vision_lora.present ? g_.Op("Unsqueeze", {gv, axes12}) : "";
  gates_.speech = cfg_.speech_lora.present ? g_.Op("Unsqueeze", {gs, axes12}) : "";
  const std::string half = g_.ConstReal({0.5f}, {});
  auto any = [&](const std::string& gate) {
    return g_.Op("Greater", {g_.Op("ReduceMax", {gate}, {Attr::Int("keepdims", 0)}), half});
  };
  if (opts_.lora == "if") {
    gates_.vision_any = cfg_.vision_lora.present ? any(gv) : "";
    gates_.speech_any = cfg_.speech_lora.present ? any(gs) : "";
  }
  // The register's new rows: q = k = 0, v = [gate_v, gate_s, 0...] in every KV head.
  const std::string axis1 = g_.ConstInts({1});
  const std::string pair = g_.Op("Concat", {g_.Op("Unsqueeze", {gv, axis1}), g_.Op("Unsqueeze", {gs, axis1})},
                                 {Attr::Int("axis", 1)});  // [B,2]
  const std::string row = g_.Op("Pad", {pair, g_.ConstInts({0, 0, 0, hd - 2})});  // [B,hd]
  const std::string heads = g_.Op("Unsqueeze", {g_.Op("Tile", {row, g_.ConstInts({1, nkv})}), axis1});  // [B,1,nkv*hd]
  const std::string v_rows = g_.Op("Expand", {heads, Dims({batch1_, seq1_, g_.ConstInts({nkv * hd})})});
  const std::string qk = g_.Op("Expand", {g_.ConstReal({0}, {1, 1, 1}), Dims({batch1_, seq1_, g_.ConstInts({(nh + nkv) * hd})})});
  const std::string packed = g_.Op("Concat", {qk, v_rows}, {Attr::Int("axis", 2)});
  g_.Node("GroupQueryAttention", {packed, "", "", PastKeyName(reg), PastValueName(reg), seqlens_, total_i32_}, 3,
          {Attr::Int("num_heads", nh), Attr::Int("kv_num_heads", nkv)}, onnx_writer::kMsDomain,
          {w_->Fresh("register_attention"), PresentKeyName(reg), PresentValueName(reg)});
  return Status::Ok();
}

Result<TextModelInfo> TextBuilder::Build() {
  const int64_t H = c_.hidden_size, hd = c_.head_dim, nkv = c_.num_key_value_heads, I = c_.intermediate_size;
  const bool any_lora = Gated();
  kv_layers_ = c_.num_hidden_layers + (any_lora ? 1 : 0);
  const std::vector<Dim> bs = {Dim("batch_size"), Dim("sequence_length")};
  g_.Input(kInputsEmbeds, w_->real_type(), {Dim("batch_size"), Dim("sequence_length"), H});
  g_.Input(kAttentionMask, ElemType::kInt64, {Dim("batch_size"), Dim("total_sequence_length")});
  if (any_lora) g_.Input(kInputIds, ElemType::kInt64, bs);
  for (int64_t l = 0; l < kv_layers_; ++l) {
    const std::vector<Dim> past = {Dim("batch_size"), nkv, Dim("past_sequence_length"), hd};
    g_.Input(PastKeyName(l), w_->real_type(), past);
    g_.Input(PastValueName(l), w_->real_type(), past);
  }
  g_.Output(kLogits, w_->real_type(), {Dim("batch_size"), int64_t{1}, c_.vocab_size});
  for (int64_t l = 0; l < kv_layers_; ++l) {
    const std::vector<Dim> present = {Dim("batch_size"), nkv, Dim("total_sequence_length"), hd};
    g_.Output(PresentKeyName(l), w_->real_type(), present);
    g_.Output(PresentValueName(l), w_->real_type(), present);
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
  PHI4MM_ASSIGN_OR_RETURN(std::vector<float> head, ReadFloats(ckpt_, head_name, c_.vocab_size, H));
  PHI4MM_ASSIGN_OR_RETURN(std::string logits,
                          Product(g_, normed, "lm_head.weight", std::move(head), c_.vocab_size, H, opts_.Int4() ? 8 : 0));
  g_.Node("Identity", {logits}, 1, {}, "", {kLogits});
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
  PHI4MM_ASSIGN_OR_RETURN(std::unique_ptr<ModelWriter> w,
                          ModelWriter::Create(out_dir, kTextFile, "phi-4-mm-text", opts.RealType()));
  TextBuilder b(ckpt, cfg, opts, w.get());
  PHI4MM_ASSIGN_OR_RETURN(TextModelInfo info, b.Build());
  PHI4MM_RETURN_IF_ERROR(w->Save());
  info.external_bytes = w->external_bytes();
  return info;
}

}  // namespace phi4mm::exporter
