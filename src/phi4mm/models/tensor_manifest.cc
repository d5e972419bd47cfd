// TensorManifest construction from a ModelConfig (the shapes the loaders check: decoder.cc,
// lora_linear.cc, embedding.cc, vision.cc, speech.cc), the layout names (the inverse of
// io/checkpoint.cc's CanonicalNameFromOriginal / CanonicalNameFromPeft) and the quant policy.
#include "phi4mm/models/tensor_manifest.h"

#include "phi4mm/kernels/conv.h"

namespace phi4mm {

const char* ModelPartName(ModelPart p) {
  switch (p) {
    case ModelPart::kEmbedding: return "embedding";
    case ModelPart::kDecoder: return "decoder";
    case ModelPart::kVision: return "vision";
    case ModelPart::kSpeech: return "speech";
  }
  return "?";
}

const char* TensorRoleName(TensorRole r) {
  switch (r) {
    case TensorRole::kEmbeddingTable: return "embedding_table";
    case TensorRole::kLmHead: return "lm_head";
    case TensorRole::kDecoderLinear: return "decoder_linear";
    case TensorRole::kLoraA: return "lora_a";
    case TensorRole::kLoraB: return "lora_b";
    case TensorRole::kEncoderLinear: return "encoder_linear";
    case TensorRole::kParameter: return "parameter";
    case TensorRole::kUnused: return "unused";
  }
  return "?";
}

int64_t TensorSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace names {
std::string DecoderLayer(int64_t layer) { return "model.layers." + std::to_string(layer) + "."; }
std::string LoraA(const std::string& module, LoraMode adapter) {
  return module + ".lora_A." + LoraModeName(adapter) + ".weight";
}
std::string LoraB(const std::string& module, LoraMode adapter) {
  return module + ".lora_B." + LoraModeName(adapter) + ".weight";
}
}  // namespace names

std::optional<WeightFormat> FormatFor(TensorRole role, QuantMode quant) {
  switch (role) {
    case TensorRole::kDecoderLinear: return LinearFormat(quant);
    case TensorRole::kEmbeddingTable:
    case TensorRole::kLmHead: return EmbeddingFormat(quant);
    case TensorRole::kLoraA:
    case TensorRole::kLoraB:
      switch (quant) {
        case QuantMode::kNone: return std::nullopt;
        case QuantMode::kBF16:
        case QuantMode::kQ8: return WeightFormat::kBF16;
        case QuantMode::kQ4: return WeightFormat::kQ4K;
        case QuantMode::kQ4M: return WeightFormat::kQ8_0;
      }
      return std::nullopt;
    case TensorRole::kEncoderLinear:
      switch (quant) {
        case QuantMode::kNone: return std::nullopt;
        case QuantMode::kBF16: return WeightFormat::kBF16;
        case QuantMode::kQ8:
        case QuantMode::kQ4:
        case QuantMode::kQ4M: return WeightFormat::kQ8_0;
      }
      return std::nullopt;
    case TensorRole::kParameter:
    case TensorRole::kUnused: return std::nullopt;
  }
  return std::nullopt;
}

bool MoreBitsLayer(int64_t layer, int64_t num_layers) {
  const int64_t eighth = num_layers / 8;
  return layer < eighth || layer >= 7 * num_layers / 8 || (layer - eighth) % 3 == 2;
}

std::optional<WeightFormat> DecoderLinearFormat(QuantMode quant, DecoderProjection proj, int64_t layer,
                                                int64_t num_layers) {
  if (quant == QuantMode::kQ4M &&
      (proj == DecoderProjection::kQkv || (proj == DecoderProjection::kDown && MoreBitsLayer(layer, num_layers))))
    return WeightFormat::kQ8_0;
  return FormatFor(TensorRole::kDecoderLinear, quant);
}

void TensorManifest::Add(TensorSpec spec) {
  index_.emplace(spec.name, tensors_.size());
  tensors_.push_back(std::move(spec));
}

const TensorSpec* TensorManifest::Find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

std::vector<const TensorSpec*> TensorManifest::Part(ModelPart part) const {
  std::vector<const TensorSpec*> out;
  for (const TensorSpec& t : tensors_)
    if (t.part == part) out.push_back(&t);
  return out;
}

namespace {

using Shape = std::vector<int64_t>;

void AddDecoder(const ModelConfig& mc, std::vector<TensorSpec>* m) {
  const TextConfig& c = mc.text;
  const int64_t H = c.hidden_size, hd = c.head_dim, I = c.intermediate_size;
  const int64_t qkv_out = (c.num_attention_heads + 2 * c.num_key_value_heads) * hd;
  struct Lin {
    const char* module;
    int64_t out, in;
  };
  const Lin lins[] = {{"self_attn.qkv_proj", qkv_out, H},
                      {"self_attn.o_proj", H, c.num_attention_heads * hd},
                      {"mlp.gate_up_proj", 2 * I, H},
                      {"mlp.down_proj", H, I}};
  m->push_back({names::kEmbedTokens, ModelPart::kEmbedding, TensorRole::kEmbeddingTable, {c.vocab_size, H}});
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = names::DecoderLayer(i);
    m->push_back({p + "input_layernorm.weight", ModelPart::kDecoder, TensorRole::kParameter, {H}});
    m->push_back({p + "post_attention_layernorm.weight", ModelPart::kDecoder, TensorRole::kParameter, {H}});
    for (const Lin& l : lins) {
      const std::string mod = p + l.module;
      m->push_back({mod + ".weight", ModelPart::kDecoder, TensorRole::kDecoderLinear, {l.out, l.in}});
      for (LoraMode a : {LoraMode::kVision, LoraMode::kSpeech}) {
        const LoraAdapterConfig& lc = a == LoraMode::kVision ? mc.vision_lora : mc.speech_lora;
        if (!lc.present) continue;
        m->push_back({names::LoraA(mod, a), ModelPart::kDecoder, TensorRole::kLoraA, {lc.rank, l.in}, a});
        m->push_back({names::LoraB(mod, a), ModelPart::kDecoder, TensorRole::kLoraB, {l.out, lc.rank}, a});
      }
    }
  }
  m->push_back({names::kFinalNorm, ModelPart::kDecoder, TensorRole::kParameter, {H}});
  if (!c.tie_word_embeddings)
    m->push_back({names::kLmHead, ModelPart::kDecoder, TensorRole::kLmHead, {c.vocab_size, H}});
}

void AddVision(const ModelConfig& mc, std::vector<TensorSpec>* m) {
  const VisionConfig& c = mc.vision;
  const int64_t D = c.hidden_size, I = c.intermediate_size, T = mc.text.hidden_size, ps = c.patch_size;
  const int64_t P = ps > 0 ? c.image_size / ps : 0;
  const std::string e = names::kVisionPrefix, p = e + "img_processor.";
  auto param = [&](const std::string& n, Shape s, TensorRole r = TensorRole::kParameter) {
    m->push_back({n, ModelPart::kVision, r, std::move(s)});
  };
  param(p + "embeddings.patch_embedding.weight", {D, 3, ps, ps});
  param(p + "embeddings.patch_embedding.bias", {D});
  param(p + "embeddings.position_embedding.weight", {P * P, D});
  // Layers up to hidden state feature_layer run; the rest are stored but unused (vision.cc).
  const int64_t n_states = c.num_hidden_layers + 1;
  const int64_t run = c.feature_layer < 0 ? n_states + c.feature_layer : c.feature_layer;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string l = p + "encoder.layers." + std::to_string(i) + ".";
    const bool used = i < run;
    const TensorRole pr = used ? TensorRole::kParameter : TensorRole::kUnused;
    const TensorRole lr = used ? TensorRole::kEncoderLinear : TensorRole::kUnused;
    for (const char* ln : {"layer_norm1", "layer_norm2"}) {
      param(l + ln + ".weight", {D}, pr);
      param(l + ln + ".bias", {D}, pr);
    }
    for (const char* proj : {"q_proj", "k_proj", "v_proj", "out_proj"}) {
      param(l + "self_attn." + proj + ".weight", {D, D}, lr);
      param(l + "self_attn." + proj + ".bias", {D}, pr);
    }
    param(l + "mlp.fc1.weight", {I, D}, lr);
    param(l + "mlp.fc1.bias", {I}, pr);
    param(l + "mlp.fc2.weight", {D, I}, lr);
    param(l + "mlp.fc2.bias", {D}, pr);
  }
  const TensorRole u = TensorRole::kUnused;
  param(p + "post_layernorm.weight", {D}, u);
  param(p + "post_layernorm.bias", {D}, u);
  param(p + "head.probe", {1, 1, D}, u);
  param(p + "head.attention.in_proj_weight", {3 * D, D}, u);
  param(p + "head.attention.in_proj_bias", {3 * D}, u);
  param(p + "head.attention.out_proj.weight", {D, D}, u);
  param(p + "head.attention.out_proj.bias", {D}, u);
  param(p + "head.layernorm.weight", {D}, u);
  param(p + "head.layernorm.bias", {D}, u);
  param(p + "head.mlp.fc1.weight", {I, D}, u);
  param(p + "head.mlp.fc1.bias", {I}, u);
  param(p + "head.mlp.fc2.weight", {D, I}, u);
  param(p + "head.mlp.fc2.bias", {D}, u);
  param(e + "global_img_feature_extensor", {1, 1, D});
  param(e + "sub_img_feature_extensor", {1, 1, 1, D});
  param(e + "img_projection_up.weight", {T, D});
  param(e + "img_projection_up.bias", {T});
  param(e + "img_projection_down.weight", {T, T});
  param(e + "img_projection_down.bias", {T});
}

void AddSpeech(const ModelConfig& mc, std::vector<TensorSpec>* m) {
  const AudioConfig& c = mc.audio;
  const int64_t d = c.hidden_size, ch = c.nemo_conv_channels, inner = c.intermediate_size, T = mc.text.hidden_size;
  const std::string a = names::kSpeechPrefix, e = a + "encoder.";
  auto param = [&](const std::string& n, Shape s, TensorRole r = TensorRole::kParameter) {
    m->push_back({n, ModelPart::kSpeech, r, std::move(s)});
  };
  const TensorRole lin = TensorRole::kEncoderLinear;
  param(e + "encoder_embedding.global_mean", {c.input_size});
  param(e + "encoder_embedding.global_invstd", {c.input_size});
  param(e + "embed.conv.0.weight", {ch, 1, 3, 3});
  param(e + "embed.conv.0.bias", {ch});
  int64_t sampling = 0;
  while ((int64_t{2} << sampling) <= c.time_reduction) ++sampling;
  int64_t freq = Stride2Length(c.input_size);
  for (int64_t s = 1; s < sampling; ++s) {
    const std::string dw = e + "embed.conv." + std::to_string(3 * s - 1), pw = e + "embed.conv." + std::to_string(3 * s);
    param(dw + ".weight", {ch, 1, 3, 3});
    param(dw + ".bias", {ch});
    param(pw + ".weight", {ch, ch, 1, 1}, lin);
    param(pw + ".bias", {ch});
    freq = Stride2Length(freq);
  }
  param(e + "embed.out.weight", {d, ch * freq}, lin);
  param(e + "embed.out.bias", {d});
  param(e + "relative_attention_bias_layer.bias_values.weight", {2 * c.bias_max_distance, c.num_attention_heads});
  for (int64_t j = 0; j < c.num_blocks; ++j) {
    const std::string p = e + "encoders." + std::to_string(j) + ".";
    for (const char* ff : {"feed_forward_in.", "feed_forward_out."}) {
      param(p + ff + "layer_norm.weight", {d});
      param(p + ff + "layer_norm.bias", {d});
      param(p + ff + "gate_up_proj.weight", {2 * inner, d}, lin);
      param(p + ff + "gate_up_proj.bias", {2 * inner});
      param(p + ff + "down_proj.weight", {d, inner}, lin);
      param(p + ff + "down_proj.bias", {d});
    }
    for (const char* proj : {"q_proj", "k_proj", "v_proj", "o_proj"}) {
      param(p + "self_attn." + proj + ".weight", {d, d}, lin);
      param(p + "self_attn." + proj + ".bias", {d});
    }
    for (const char* ln : {"layer_norm_att", "conv.layer_norm", "layer_norm"}) {
      param(p + ln + ".weight", {d});
      param(p + ln + ".bias", {d});
    }
    param(p + "conv.glu.ext_pw_conv_1d.weight", {2 * d, d, 1}, lin);
    param(p + "conv.glu.ext_pw_conv_1d.bias", {2 * d});
    param(p + "conv.glu.b1", {1, d, 1});
    param(p + "conv.glu.b2", {1, d, 1});
    param(p + "conv.dw_sep_conv_1d.dw_conv.weight", {d, 1, c.kernel_size});
    param(p + "conv.dw_sep_conv_1d.dw_conv.bias", {d});
    param(p + "conv.dw_sep_conv_1d.pw_conv.weight", {d, d, 1}, lin);
    param(p + "conv.dw_sep_conv_1d.pw_conv.bias", {d});
    param(p + "conv.ext_pw_conv_1d.weight", {d, d, 1}, lin);
    param(p + "conv.ext_pw_conv_1d.bias", {d});
  }
  for (const char* proj : {"speech", "vision_speech"}) {
    param(a + "up_proj_for_" + proj + ".weight", {T, d});
    param(a + "up_proj_for_" + proj + ".bias", {T});
    param(a + "down_proj_for_" + proj + ".weight", {T, T});
    param(a + "down_proj_for_" + proj + ".bias", {T});
  }
}

bool StartsWith(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

bool ReplacePrefix(std::string* s, const std::string& from, const std::string& to) {
  if (!StartsWith(*s, from)) return false;
  s->replace(0, from.size(), to);
  return true;
}

void ReplaceFirst(std::string* s, const std::string& from, const std::string& to) {
  const size_t pos = s->find(from);
  if (pos != std::string::npos) s->replace(pos, from.size(), to);
}

// The original layout's name of a canonical name (CanonicalNameFromOriginal inverted).
std::string OriginalName(const TensorSpec& t) {
  std::string n = t.name;
  if (t.role == TensorRole::kDecoderLinear) {
    n.insert(n.size() - std::string(".weight").size(), ".base_layer");
    return n;
  }
  const std::string img = names::kVisionPrefix, aud = names::kSpeechPrefix;
  if (StartsWith(n, img)) {
    std::string rest = n.substr(img.size());
    if (!ReplacePrefix(&rest, "img_projection_up.", "img_projection.0.") &&
        !ReplacePrefix(&rest, "img_projection_down.", "img_projection.2.")) {
      if (rest == "global_img_feature_extensor") rest = "glb_GN";
      else if (rest == "sub_img_feature_extensor") rest = "sub_GN";
    }
    return img + rest;
  }
  if (StartsWith(n, aud)) {
    std::string rest = n.substr(aud.size());
    static const std::pair<const char*, const char*> kProj[] = {
        {"up_proj_for_speech.", "audio_projection.speech.0."},
        {"down_proj_for_speech.", "audio_projection.speech.2."},
        {"up_proj_for_vision_speech.", "audio_projection.vision.0."},
        {"down_proj_for_vision_speech.", "audio_projection.vision.2."}};
    for (const auto& [from, to] : kProj)
      if (ReplacePrefix(&rest, from, to)) return aud + rest;
    if (StartsWith(rest, "encoder.encoders.")) {
      ReplaceFirst(&rest, ".gate_up_proj.", ".net.0.linear.");
      ReplaceFirst(&rest, ".down_proj.", ".net.2.");
      ReplaceFirst(&rest, ".self_attn.q_proj.", ".self_attn.linear_q.");
      ReplaceFirst(&rest, ".self_attn.k_proj.", ".self_attn.linear_k.");
      ReplaceFirst(&rest, ".self_attn.v_proj.", ".self_attn.linear_v.");
      ReplaceFirst(&rest, ".self_attn.o_proj.", ".self_attn.linear_out.");
    }
    return aud + rest;
  }
  return n;
}

}  // namespace

TensorManifest TensorManifest::ForConfig(const ModelConfig& cfg) {
  std::vector<TensorSpec> specs;
  AddDecoder(cfg, &specs);
  AddVision(cfg, &specs);
  AddSpeech(cfg, &specs);
  TensorManifest m;
  for (TensorSpec& s : specs) m.Add(std::move(s));
  return m;
}

StoredName StoredNameIn(const TensorSpec& spec, CheckpointLayout layout) {
  if (layout == CheckpointLayout::kOriginal) return {"", OriginalName(spec)};
  if (spec.role == TensorRole::kLoraA || spec.role == TensorRole::kLoraB) {
    // "<module>.lora_A.<adapter>.weight" -> "<adapter>-lora/adapter_model.safetensors": "<module>.lora_A.weight"
    std::string key = spec.name;
    const std::string tag = std::string(".") + LoraModeName(spec.adapter) + ".weight";
    key.replace(key.size() - tag.size(), tag.size(), ".weight");
    return {std::string(LoraModeName(spec.adapter)) + "-lora/adapter_model.safetensors", key};
  }
  return {"", spec.name};
}

}  // namespace phi4mm
