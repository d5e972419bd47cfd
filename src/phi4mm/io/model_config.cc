// Parsing of config.json (both layouts), generation_config.json, preprocessor_config.json and the
// native layout's PEFT adapter_config.json files, with validation. Fields the engine does not read
// because it implements one value of them (activations, biases, sliding window, HD transform order,
// PEFT variants, processor constants, ...) are checked against that value, with the reference's own
// default when the key is absent, and refused as Unsupported otherwise, so a config describing some
// other model never loads as if it were this one (docs/reference-deviations.md lists them).
#include "phi4mm/io/model_config.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>

#include <nlohmann/json.hpp>

#include "phi4mm/base/file_map.h"

namespace phi4mm {

using nlohmann::json;

const char* LayoutName(CheckpointLayout l) {
  return l == CheckpointLayout::kOriginal ? "original (phi4mm)" : "native (phi4_multimodal)";
}

namespace {

Result<json> ParseJson(const std::string& text, const std::string& label) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    return InvalidArgument("malformed JSON in " + label + ": " + e.what());
  }
}

Result<json> ReadJsonFile(const std::string& path) {
  PHI4MM_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  return ParseJson(text, "'" + path + "'");
}

// True when `d` converts to int64_t without overflow (2^63 itself does not).
bool InInt64Range(double d) { return d >= -9223372036854775808.0 && d < 9223372036854775808.0; }

// Typed field readers: absent keys keep the default; present keys of the wrong type are errors.
class Reader {
 public:
  Reader(const json& j, std::string label) : j_(j), label_(std::move(label)) {}
  const Status& status() const { return st_; }
  bool has(const char* key) const { return j_.is_object() && j_.contains(key) && !j_[key].is_null(); }

  void Int(const char* key, int64_t* out) {
    if (!has(key)) return;
    const auto& v = j_[key];
    if (v.is_number_integer()) *out = v.get<int64_t>();
    else if (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>() && InInt64Range(v.get<double>()))
      *out = static_cast<int64_t>(v.get<double>());
    else Fail(key, "an integer", v);
  }
  void Double(const char* key, double* out) {
    if (!has(key)) return;
    if (j_[key].is_number()) *out = j_[key].get<double>();
    else Fail(key, "a number", j_[key]);
  }
  void Bool(const char* key, bool* out) {
    if (!has(key)) return;
    if (j_[key].is_boolean()) *out = j_[key].get<bool>();
    else Fail(key, "true or false", j_[key]);
  }
  void String(const char* key, std::string* out) {
    if (!has(key)) return;
    if (j_[key].is_string()) *out = j_[key].get<std::string>();
    else Fail(key, "a string", j_[key]);
  }
  void Doubles(const char* key, std::vector<double>* out) {
    if (!has(key)) return;
    const auto& v = j_[key];
    if (!v.is_array()) return Fail(key, "a list of numbers", v);
    out->clear();
    for (const auto& e : v) {
      if (!e.is_number()) return Fail(key, "a list of numbers", v);
      out->push_back(e.get<double>());
    }
  }
  // An int or a list of ints.
  void Ids(const char* key, std::vector<int32_t>* out) {
    if (!has(key)) return;
    const auto& v = j_[key];
    out->clear();
    if (v.is_number_integer()) {
      out->push_back(v.get<int32_t>());
      return;
    }
    if (!v.is_array()) return Fail(key, "a token id or a list of token ids", v);
    for (const auto& e : v) {
      if (!e.is_number_integer()) return Fail(key, "a list of token ids", v);
      out->push_back(e.get<int32_t>());
    }
  }

 private:
  void Fail(const char* key, const char* want, const json& got) {
    if (st_.ok()) st_ = InvalidArgument(label_ + ": '" + key + "' should be " + want + ", got " + got.dump());
  }
  const json& j_;
  std::string label_;
  Status st_;
};

// A field phi4mm does not read because it implements only `accepted` values of it; `fallback` is
// what the reference uses when the key is absent, `supported` says in words what phi4mm implements.
struct FixedField {
  const char* key;
  json fallback;
  std::vector<json> accepted;
  const char* supported;
};

// Unsupported, naming the first field of `fields` whose value in `obj` (or, when absent, its
// fallback) is not accepted.
Status RefuseOtherValues(const json& obj, const std::string& label, std::initializer_list<FixedField> fields) {
  for (const FixedField& f : fields) {
    const bool present = obj.is_object() && obj.contains(f.key);
    const json& v = present ? obj[f.key] : f.fallback;
    if (std::find(f.accepted.begin(), f.accepted.end(), v) != f.accepted.end()) continue;
    std::string key = "'";
    key.append(f.key).append("'");
    if (present)
      return Unsupported(label + ": " + key + " = " + v.dump() + " is not implemented by phi4mm, which supports " +
                         f.supported);
    return Unsupported(label + ": " + key + " is absent, so the reference uses its default " + v.dump() +
                       ", which phi4mm does not implement; phi4mm supports " + f.supported);
  }
  return Status::Ok();
}

constexpr const char* kSilu = "\"silu\" (x * sigmoid(x), also spelled \"swish\")";
constexpr const char* kSwish = "\"swish\" (x * sigmoid(x))";

Status ReadText(const json& j, const std::string& label, TextConfig* t) {
  Reader r(j, label);
  r.Int("vocab_size", &t->vocab_size);
  r.Int("hidden_size", &t->hidden_size);
  r.Int("intermediate_size", &t->intermediate_size);
  r.Int("num_hidden_layers", &t->num_hidden_layers);
  r.Int("num_attention_heads", &t->num_attention_heads);
  t->num_key_value_heads = t->num_attention_heads;
  r.Int("num_key_value_heads", &t->num_key_value_heads);
  r.Double("rms_norm_eps", &t->rms_norm_eps);
  r.Double("rope_theta", &t->rope_theta);
  r.Double("partial_rotary_factor", &t->partial_rotary_factor);
  r.Int("max_position_embeddings", &t->max_position_embeddings);
  r.Int("original_max_position_embeddings", &t->original_max_position_embeddings);
  r.Bool("tie_word_embeddings", &t->tie_word_embeddings);
  if (t->num_attention_heads > 0) t->head_dim = t->hidden_size / t->num_attention_heads;
  r.Int("head_dim", &t->head_dim);
  PHI4MM_RETURN_IF_ERROR(r.status());

  // rope_scaling (4.x and the original) or rope_parameters (transformers v5); rope_scaling wins
  // when both are set, as in v5's convert_rope_params_to_dict.
  const bool has_scaling = j.contains("rope_scaling") && !j["rope_scaling"].is_null();
  const char* rope_key = has_scaling ? "rope_scaling" : "rope_parameters";
  if (j.contains(rope_key) && !j[rope_key].is_null()) {
    const json& rs = j[rope_key];
    if (!rs.is_object()) return InvalidArgument(label + ": '" + rope_key + "' should be an object");
    const std::string rlabel = label + " " + rope_key;
    Reader rr(rs, rlabel);
    std::string type;
    rr.String("type", &type);
    rr.String("rope_type", &type);
    if (rs.contains("rope_theta")) rr.Double("rope_theta", &t->rope_theta);
    // v5 keeps these two in rope_parameters; a value given in both places must agree.
    double inner_factor = t->partial_rotary_factor;
    int64_t inner_original = t->original_max_position_embeddings;
    rr.Double("partial_rotary_factor", &inner_factor);
    rr.Int("original_max_position_embeddings", &inner_original);
    PHI4MM_RETURN_IF_ERROR(rr.status());
    for (const char* key : {"partial_rotary_factor", "original_max_position_embeddings"})
      if (rr.has(key) && r.has(key) && rs[key] != j[key])
        return InvalidArgument(rlabel + ": '" + key + "' = " + rs[key].dump() + " disagrees with the top-level '" +
                               key + "' = " + j[key].dump() + "; give it once");
    t->partial_rotary_factor = inner_factor;
    t->original_max_position_embeddings = inner_original;
    if (type == "longrope" || type == "su") {
      rr.Doubles("short_factor", &t->rope_short_factor);
      rr.Doubles("long_factor", &t->rope_long_factor);
      double attention_factor = 0;
      rr.Double("attention_factor", &attention_factor);
      double factor = 0;
      rr.Double("factor", &factor);
      PHI4MM_RETURN_IF_ERROR(rr.status());
      const double ratio = t->original_max_position_embeddings > 0
                               ? static_cast<double>(t->max_position_embeddings) /
                                     static_cast<double>(t->original_max_position_embeddings)
                               : 0.0;
      if (rr.has("attention_factor")) {
        t->rope_attention_factor = attention_factor;
      } else if (t->original_max_position_embeddings > 0) {
        // transformers 4.x derives the factor from max / original and ignores 'factor'; v5 uses
        // 'factor' when it is given. Only a 'factor' equal to the ratio means the same in both.
        if (rr.has("factor") && factor != ratio)
          return Unsupported(rlabel + ": 'factor' = " + rs["factor"].dump() +
                             " differs from max_position_embeddings / original_max_position_embeddings = " +
                             json(ratio).dump() +
                             "; transformers 4.x uses the ratio and v5 uses 'factor' for the LongRoPE attention "
                             "factor, so the reference itself is ambiguous; phi4mm supports 'factor' absent or equal "
                             "to the ratio, or an explicit 'attention_factor'");
        // HF _compute_longrope_parameters: sqrt(1 + ln f / ln original) for f = max / original > 1.
        t->rope_attention_factor =
            ratio <= 1.0 ? 1.0
                         : std::sqrt(1.0 + std::log(ratio) /
                                               std::log(static_cast<double>(t->original_max_position_embeddings)));
      }
    } else if (type.empty()) {
      if (rr.has("short_factor") || rr.has("long_factor"))
        return InvalidArgument(rlabel + " has short_factor/long_factor but no 'type'; set \"type\": \"longrope\"");
    } else if (type != "default") {
      return Unsupported(label + ": rope scaling type '" + type + "' is not supported (expected longrope)");
    }
  }
  return Status::Ok();
}

// Text fields phi4mm implements one value of (reference-spec §1.1, §7): refused when they ask for
// something else. The biases, full_attn_mod and interpolate_factor are not read by either reference
// (both build these layers one way), so another value describes a model neither implements. The
// dropouts (embd_pdrop, resid_pdrop, attention_dropout) act only in training.
Status RefuseUnimplementedText(const json& j, const std::string& label, CheckpointLayout layout, const TextConfig& t) {
  PHI4MM_RETURN_IF_ERROR(RefuseOtherValues(
      j, label,
      {{"hidden_act", "silu", {"silu", "swish"}, kSilu},
       {"attention_bias", false, {false}, "false (the q/k/v and o projections have no bias)"},
       {"mlp_bias", false, {false}, "false (gate_up_proj and down_proj have no bias)"},
       {"lm_head_bias", false, {false}, "false (lm_head has no bias)"},
       {"full_attn_mod", 1, {1}, "1 (every layer uses dense attention)"},
       {"interpolate_factor", 1, {1}, "1 (no position interpolation)"}}));
  Reader r(j, label);
  int64_t window = 0;
  r.Int("sliding_window", &window);
  PHI4MM_RETURN_IF_ERROR(r.status());
  if (r.has("sliding_window") && window < t.max_position_embeddings)
    return Unsupported(label + ": 'sliding_window' = " + std::to_string(window) +
                       " is shorter than max_position_embeddings (" + std::to_string(t.max_position_embeddings) +
                       "): the reference then lets each position attend only to the last " + std::to_string(window) +
                       " positions (itself included), which phi4mm does not implement; phi4mm supports full causal "
                       "attention (sliding_window absent, null, or at least max_position_embeddings; the released "
                       "checkpoint has 262144)");
  // The original code derives head_dim = hidden_size / num_attention_heads and reads no head_dim key.
  if (layout == CheckpointLayout::kOriginal && r.has("head_dim") && t.num_attention_heads > 0 &&
      (t.hidden_size % t.num_attention_heads != 0 || t.head_dim != t.hidden_size / t.num_attention_heads))
    return Unsupported(label + ": 'head_dim' = " + std::to_string(t.head_dim) +
                       " differs from hidden_size / num_attention_heads = " + std::to_string(t.hidden_size) + " / " +
                       std::to_string(t.num_attention_heads) +
                       ", which Microsoft's original code always uses (it reads no head_dim); phi4mm supports "
                       "head_dim absent or equal to that ratio in this layout");
  return Status::Ok();
}

Status ReadVisionNative(const json& j, const std::string& label, VisionConfig* v) {
  Reader r(j, label);
  r.Int("hidden_size", &v->hidden_size);
  r.Int("intermediate_size", &v->intermediate_size);
  r.Int("num_hidden_layers", &v->num_hidden_layers);
  r.Int("num_attention_heads", &v->num_attention_heads);
  r.Int("image_size", &v->image_size);
  r.Int("patch_size", &v->patch_size);
  r.Int("crop_size", &v->crop_size);
  r.Int("feature_layer", &v->feature_layer);
  r.Double("layer_norm_eps", &v->layer_norm_eps);
  r.Int("image_token_id", &v->image_token_id);
  PHI4MM_RETURN_IF_ERROR(r.status());
  if (v->image_token_id != VisionConfig{}.image_token_id)
    return Unsupported(label + ": 'image_token_id' = " + std::to_string(v->image_token_id) +
                       " is not implemented by phi4mm, which supports " +
                       std::to_string(VisionConfig{}.image_token_id) + " (<|endoftext10|>, the image placeholder)");
  // attention_dropout acts only in training.
  return RefuseOtherValues(
      j, label,
      {{"hidden_act", "gelu_pytorch_tanh", {"gelu_pytorch_tanh"}, "\"gelu_pytorch_tanh\" (SigLIP's tanh GELU)"},
       {"num_channels", 3, {3}, "3 (RGB pixels)"}});
}

Status ReadAudioNative(const json& j, const std::string& label, AudioConfig* a) {
  Reader r(j, label);
  r.Int("input_size", &a->input_size);
  r.Int("hidden_size", &a->hidden_size);
  r.Int("num_attention_heads", &a->num_attention_heads);
  r.Int("intermediate_size", &a->intermediate_size);
  r.Int("num_blocks", &a->num_blocks);
  r.Int("nemo_conv_channels", &a->nemo_conv_channels);
  r.Int("kernel_size", &a->kernel_size);
  r.Int("time_reduction", &a->time_reduction);
  r.Int("ext_pw_out_channel", &a->ext_pw_out_channel);
  r.Int("depthwise_separable_out_channel", &a->depthwise_separable_out_channel);
  r.Int("depthwise_seperable_out_channel", &a->depthwise_separable_out_channel);
  r.Int("depthwise_multiplier", &a->depthwise_multiplier);
  r.Int("bias_max_distance", &a->bias_max_distance);
  r.Int("left_chunk", &a->left_chunk);
  r.Int("chunk_size", &a->chunk_size);
  r.Int("audio_token_id", &a->audio_token_id);
  PHI4MM_RETURN_IF_ERROR(r.status());
  if (a->audio_token_id != AudioConfig{}.audio_token_id)
    return Unsupported(label + ": 'audio_token_id' = " + std::to_string(a->audio_token_id) +
                       " is not implemented by phi4mm, which supports " +
                       std::to_string(AudioConfig{}.audio_token_id) + " (<|endoftext11|>, the audio placeholder)");
  // dropout_rate acts only in training; feature_layer and initializer_range are not used by the
  // port's forward; nemo_final_size is derived from input_size and time_reduction.
  return RefuseOtherValues(
      j, label,
      {{"activation", "swish", {"swish", "silu"}, kSilu},
       {"conv_activation", "swish", {"swish", "silu"}, kSilu},
       {"conv_glu_type", "swish", {"swish", "silu"}, kSilu},
       {"nemo_activation", "relu", {"relu"}, "\"relu\" (the NeMo subsampling convolutions)"},
       {"bias_symmetric", false, {false}, "false (the T5 bias table has 2 * bias_max_distance rows, j - i signed)"},
       {"downsample_rate", 1, {1}, "1 (no downsampling of the encoder output before the projection)"}});
}

// Original layout: audio_processor.config uses the Conformer's own names.
Status ReadAudioOriginal(const json& j, const std::string& label, AudioConfig* a) {
  Reader r(j, label);
  r.Int("input_size", &a->input_size);
  r.Int("attention_dim", &a->hidden_size);
  r.Int("attention_heads", &a->num_attention_heads);
  r.Int("linear_units", &a->intermediate_size);
  r.Int("num_blocks", &a->num_blocks);
  r.Int("kernel_size", &a->kernel_size);
  r.Int("time_reduction", &a->time_reduction);
  r.Int("ext_pw_out_channel", &a->ext_pw_out_channel);
  r.Int("depthwise_seperable_out_channel", &a->depthwise_separable_out_channel);
  r.Int("depthwise_separable_out_channel", &a->depthwise_separable_out_channel);
  r.Int("depthwise_multiplier", &a->depthwise_multiplier);
  r.Int("left_chunk", &a->left_chunk);
  r.Int("chunk_size", &a->chunk_size);
  PHI4MM_RETURN_IF_ERROR(r.status());
  // The reference's defaults are ConformerEncoder's arguments (speech_conformer_encoder.py), not
  // the released values, so an absent key can also mean another model. dropout_rate and
  // activation_checkpointing act only in training; cnn_out, cnn_layer_norm, attention_glu_type,
  // num_lang and extra_layer_output_idx do not reach the encoder output; encoder_embedding_config
  // only sizes the mean/invstd buffers (shape-checked); replication_pad_for_subsample_embedding
  // acts only in streaming decoding.
  PHI4MM_RETURN_IF_ERROR(RefuseOtherValues(
      j, label,
      {{"activation", "relu", {"swish"}, kSwish},
       {"conv_activation", "relu", {"swish"}, kSwish},
       {"conv_glu_type", "sigmoid", {"swish"}, kSwish},
       {"bias_in_glu", true, {true}, "true (the GLU and feed-forward layers have their biases)"},
       {"causal", true, {true}, "true (the depthwise convolution sees only past frames)"},
       {"batch_norm", false, {false}, "false (no batch norm in the convolution module)"},
       {"input_layer", "nemo_conv", {"nemo_conv"}, "\"nemo_conv\" (NeMo dw_striding subsampling)"},
       {"ext_pw_kernel_size", 1, {1}, "1 (pointwise GLU convolution)"},
       {"linear_glu_in_convm", false, {false}, "false (GLUPointWiseConv in the convolution module)"},
       {"chunk_se", 0, {0}, "0 (no squeeze-and-excitation)"},
       {"export", false, {false}, "false (padded convolutions, as trained)"},
       {"attention_group_size", 1, {1}, "1 (multi-head attention, no grouped keys and values)"},
       {"conv2d_extra_padding", "none", {"none"}, "\"none\""},
       {"use_pt_scaled_dot_product_attention", false, {false},
        "false (masked softmax: masked keys get probability 0)"}}));
  const json none;
  const json& nemo = j.contains("nemo_conv_settings") ? j["nemo_conv_settings"] : none;
  if (nemo.is_object()) {
    Reader n(nemo, label + " nemo_conv_settings");
    n.Int("conv_channels", &a->nemo_conv_channels);
    PHI4MM_RETURN_IF_ERROR(n.status());
  }
  // subsampling_conv_chunking_factor only splits the work to save memory.
  PHI4MM_RETURN_IF_ERROR(RefuseOtherValues(
      nemo, label + " nemo_conv_settings",
      {{"subsampling", "dw_striding", {"dw_striding"}, "\"dw_striding\" (depthwise-separable stride-2 convolutions)"},
       {"is_causal", false, {false}, "false (symmetric padding in the subsampling convolutions)"}}));
  const json& bias = j.contains("relative_attention_bias_args") ? j["relative_attention_bias_args"] : none;
  if (!bias.is_object())
    return Unsupported(label + ": 'relative_attention_bias_args' is " + (bias.is_null() ? "absent" : bias.dump()) +
                       ", for which the reference builds no attention bias (it raises NotImplementedError); phi4mm "
                       "supports {\"type\": \"t5\", \"t5_bias_max_distance\": N}");
  Reader b(bias, label + " relative_attention_bias_args");
  b.Int("t5_bias_max_distance", &a->bias_max_distance);
  PHI4MM_RETURN_IF_ERROR(b.status());
  return RefuseOtherValues(
      bias, label + " relative_attention_bias_args",
      {{"type", nullptr, {"t5"}, "\"t5\" (a learned bias per relative position and head)"},
       {"t5_bias_symmetric", false, {false}, "false (the bias depends on the signed distance j - i)"}});
}

Status ReadLora(const json& j, const std::string& label, LoraAdapterConfig* l) {
  Reader r(j, label);
  r.Int("r", &l->rank);
  r.Double("lora_alpha", &l->alpha);
  PHI4MM_RETURN_IF_ERROR(r.status());
  if (l->rank <= 0) return InvalidArgument(label + ": LoRA rank 'r' must be a positive integer");
  // PEFT variants that change y = W x + (alpha / r) B A x (absent in the original layout's
  // vision_lora/speech_lora, whose 'dp' dropout acts only in training). lora_dropout,
  // init_lora_weights, the initialisers (loftq, eva, corda) and the bookkeeping keys do not change
  // the forward pass; the adapted modules are the ones whose lora_A/lora_B tensors exist.
  PHI4MM_RETURN_IF_ERROR(RefuseOtherValues(
      j, label,
      {{"peft_type", "LORA", {"LORA"}, "\"LORA\""},
       {"use_rslora", false, {false}, "false (scale alpha / r, not alpha / sqrt(r))"},
       {"use_dora", false, {false}, "false (no weight-decomposed magnitude vector)"},
       {"use_qalora", false, {false}, "false"},
       {"bias", "none", {"none"}, "\"none\" (no trained biases)"},
       {"lora_bias", false, {false}, "false (no bias on lora_B)"},
       {"fan_in_fan_out", false, {false}, "false (weights stored [out, in])"},
       {"rank_pattern", json::object(), {json::object(), nullptr}, "{} (one rank for every module)"},
       {"alpha_pattern", json::object(), {json::object(), nullptr}, "{} (one alpha for every module)"},
       {"modules_to_save", nullptr, {nullptr, json::array()}, "null (no fully replaced modules)"},
       {"layers_to_transform", nullptr, {nullptr}, "null (every decoder layer adapted)"},
       {"layer_replication", nullptr, {nullptr}, "null"},
       {"trainable_token_indices", nullptr, {nullptr}, "null (no trained embedding rows)"},
       {"target_parameters", nullptr, {nullptr}, "null"}}));
  l->present = true;
  return Status::Ok();
}

}  // namespace

Result<ModelConfig> ModelConfig::ParseConfigJson(const std::string& text, const std::string& label) {
  PHI4MM_ASSIGN_OR_RETURN(json j, ParseJson(text, label));
  if (!j.is_object()) return InvalidArgument(label + " is not a JSON object");
  ModelConfig c;
  Reader r(j, label);
  r.String("model_type", &c.model_type);
  r.String("torch_dtype", &c.torch_dtype);
  PHI4MM_RETURN_IF_ERROR(r.status());
  if (c.model_type == "phi4mm") {
    c.layout = CheckpointLayout::kOriginal;
  } else if (c.model_type == "phi4_multimodal") {
    c.layout = CheckpointLayout::kNative;
  } else if (c.model_type.empty()) {
    return InvalidArgument(label + " has no 'model_type'; expected \"phi4mm\" (Microsoft's checkpoint) or "
                           "\"phi4_multimodal\" (transformers' native port)");
  } else {
    return Unsupported(label + ": model_type '" + c.model_type +
                       "' is not Phi-4-multimodal; phi4mm loads model_type \"phi4mm\" or \"phi4_multimodal\"");
  }
  // Native v5 may nest the text fields under text_config; 4.x and the original keep them on top.
  const json& tj = (j.contains("text_config") && j["text_config"].is_object()) ? j["text_config"] : j;
  PHI4MM_RETURN_IF_ERROR(ReadText(tj, label, &c.text));
  PHI4MM_RETURN_IF_ERROR(RefuseUnimplementedText(tj, label, c.layout, c.text));
  Reader ids(j, label);
  ids.Ids("eos_token_id", &c.generation.eos_token_ids);
  PHI4MM_RETURN_IF_ERROR(ids.status());

  if (c.layout == CheckpointLayout::kNative) {
    if (j.contains("vision_config") && j["vision_config"].is_object())
      PHI4MM_RETURN_IF_ERROR(ReadVisionNative(j["vision_config"], label + " vision_config", &c.vision));
    if (j.contains("audio_config") && j["audio_config"].is_object())
      PHI4MM_RETURN_IF_ERROR(ReadAudioNative(j["audio_config"], label + " audio_config", &c.audio));
  } else {
    if (j.contains("embd_layer") && j["embd_layer"].is_object()) {
      const json& e = j["embd_layer"];
      if (e.contains("image_embd_layer") && e["image_embd_layer"].is_object()) {
        const json& ie = e["image_embd_layer"];
        const std::string ilabel = label + " embd_layer.image_embd_layer";
        Reader ir(ie, ilabel);
        ir.Int("crop_size", &c.vision.crop_size);
        PHI4MM_RETURN_IF_ERROR(ir.status());
        c.vision.image_size = c.vision.crop_size;
        // Phi4MMImageEmbedding's kwargs.get defaults; embedding_cls and the gradient checkpointing
        // flag do not change the forward pass.
        PHI4MM_RETURN_IF_ERROR(RefuseOtherValues(
            ie, ilabel,
            {{"image_token_compression_cls", nullptr, {"avg_pool_2d"}, "\"avg_pool_2d\" (2x2 average pooling)"},
             {"use_hd_transform", false, {true}, "true (the dynamic-HD crops)"},
             {"with_learnable_separator", false, {true}, "true (learned glb_GN/sub_GN separators)"},
             {"hd_transform_order", "glb_sub", {"sub_glb"}, "\"sub_glb\" (the crops, then the global view)"},
             {"projection_cls", "linear", {"mlp"}, "\"mlp\" (Linear, GELU, Linear)"}}));
        // The original hard-codes SigLIP-so400m (get_siglip_vision_model); small test checkpoints
        // describe their tower in embd_layer.image_embd_layer.vision_config (docs/fixtures.md).
        if (ie.contains("vision_config") && ie["vision_config"].is_object())
          PHI4MM_RETURN_IF_ERROR(ReadVisionNative(ie["vision_config"], ilabel + ".vision_config", &c.vision));
      }
      if (e.contains("audio_embd_layer") && e["audio_embd_layer"].is_object()) {
        // compression_rate is the processor's (preprocessor_config.json's audio_compression_rate
        // counts the tokens); embedding_cls and gradient checkpointing do not change the forward.
        PHI4MM_RETURN_IF_ERROR(RefuseOtherValues(
            e["audio_embd_layer"], label + " embd_layer.audio_embd_layer",
            {{"projection_cls", "linear", {"mlp"}, "\"mlp\" (Linear, GELU, Linear per projection mode)"},
             {"downsample_rate", 1, {1}, "1 (no downsampling of the encoder output)"},
             {"use_qformer", false, {false}, "false (no Q-Former)"},
             {"use_conv_downsample", false, {false}, "false (no convolutional downsampling)"}}));
      }
    }
    // Phi4MMImageEmbedding reads the feature layer and kind from img_processor when it is a dict.
    if (j.contains("img_processor") && j["img_processor"].is_object())
      PHI4MM_RETURN_IF_ERROR(RefuseOtherValues(
          j["img_processor"], label + " img_processor",
          {{"layer_idx", -2, {-2}, "-2 (the second-to-last SigLIP hidden state)"},
           {"type_feature", "patch", {"patch"}, "\"patch\" (patch features, no class token)"}}));
    if (j.contains("audio_processor") && j["audio_processor"].is_object()) {
      const json& ap = j["audio_processor"];
      PHI4MM_RETURN_IF_ERROR(RefuseOtherValues(ap, label + " audio_processor",
                                               {{"name", nullptr, {"cascades"}, "\"cascades\" (the Conformer)"}}));
      if (ap.contains("config") && ap["config"].is_object())
        PHI4MM_RETURN_IF_ERROR(ReadAudioOriginal(ap["config"], label + " audio_processor.config", &c.audio));
    }
    if (j.contains("vision_lora") && j["vision_lora"].is_object())
      PHI4MM_RETURN_IF_ERROR(ReadLora(j["vision_lora"], label + " vision_lora", &c.vision_lora));
    if (j.contains("speech_lora") && j["speech_lora"].is_object())
      PHI4MM_RETURN_IF_ERROR(ReadLora(j["speech_lora"], label + " speech_lora", &c.speech_lora));
  }
  return c;
}

Result<ModelConfig> ModelConfig::LoadFromDir(const std::string& dir) {
  const std::string path = JoinPath(dir, "config.json");
  if (!FileExists(dir)) return NotFound("model folder '" + dir + "' does not exist");
  if (!FileExists(path))
    return NotFound("'" + dir + "' has no config.json; point -m at a Phi-4-multimodal checkpoint folder");
  PHI4MM_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  PHI4MM_ASSIGN_OR_RETURN(ModelConfig c, ParseConfigJson(text, "'" + path + "'"));

  const std::string gen_path = JoinPath(dir, "generation_config.json");
  if (FileExists(gen_path)) {
    PHI4MM_ASSIGN_OR_RETURN(json g, ReadJsonFile(gen_path));
    Reader r(g, "'" + gen_path + "'");
    r.Ids("eos_token_id", &c.generation.eos_token_ids);
    int64_t bos = c.generation.bos_token_id, pad = c.generation.pad_token_id;
    r.Int("bos_token_id", &bos);
    r.Int("pad_token_id", &pad);
    PHI4MM_RETURN_IF_ERROR(r.status());
    c.generation.bos_token_id = static_cast<int32_t>(bos);
    c.generation.pad_token_id = static_cast<int32_t>(pad);
  }
  const std::string pre_path = JoinPath(dir, "preprocessor_config.json");
  if (FileExists(pre_path)) {
    PHI4MM_ASSIGN_OR_RETURN(json p, ReadJsonFile(pre_path));
    Reader r(p, "'" + pre_path + "'");
    r.Int("dynamic_hd", &c.preprocessor.dynamic_hd);
    r.Int("audio_compression_rate", &c.preprocessor.audio_compression_rate);
    r.Int("audio_downsample_rate", &c.preprocessor.audio_downsample_rate);
    r.Int("audio_feat_stride", &c.preprocessor.audio_feat_stride);
    PHI4MM_RETURN_IF_ERROR(r.status());
    // The processors are the original's, with their constants built in (reference-spec §2, §4);
    // transformers' port writes them here. Absent keys mean those constants. The image geometry
    // (size, patch_size) comes from the vision config, and padding_value only pads batches, which
    // phi4mm never forms (one clip per encoder call).
    const json half = json::array({0.5, 0.5, 0.5});
    PHI4MM_RETURN_IF_ERROR(RefuseOtherValues(
        p, "'" + pre_path + "'",
        {{"audio_feat_stride", 1, {1}, "1 (one audio frame per log-mel frame)"},
         {"sampling_rate", 16000, {16000}, "16000 (audio is resampled to 16 kHz)"},
         {"feature_size", 80, {80}, "80 (log-mel bands)"},
         {"n_fft", 512, {512}, "512"},
         {"hop_length", 160, {160}, "160"},
         {"win_length", 400, {400}, "400"},
         {"preemphasis", 0.97, {0.97}, "0.97"},
         {"mel_min_frequency", 0, {0}, "0 Hz"},
         {"mel_max_frequency", 7690, {7690}, "7690 Hz"},
         {"do_convert_rgb", true, {true}, "true"},
         {"do_rescale", true, {true}, "true"},
         {"rescale_factor", 1.0 / 255.0, {1.0 / 255.0}, "1/255"},
         {"do_normalize", true, {true}, "true"},
         {"image_mean", half, {half, 0.5}, "[0.5, 0.5, 0.5]"},
         {"image_std", half, {half, 0.5}, "[0.5, 0.5, 0.5]"}}));
  }
  if (c.layout == CheckpointLayout::kNative) {
    for (auto [sub, lora] : {std::pair{"vision-lora", &c.vision_lora}, std::pair{"speech-lora", &c.speech_lora}}) {
      const std::string ap = JoinPath(JoinPath(dir, sub), "adapter_config.json");
      if (!FileExists(ap)) continue;
      PHI4MM_ASSIGN_OR_RETURN(json a, ReadJsonFile(ap));
      PHI4MM_RETURN_IF_ERROR(ReadLora(a, "'" + ap + "'", lora));
    }
  }
  if (c.generation.eos_token_ids.empty()) c.generation.eos_token_ids = {200020, 199999};
  PHI4MM_RETURN_IF_ERROR(c.Validate().WithContext("'" + path + "'"));
  return c;
}

Status ModelConfig::Validate() const {
  const TextConfig& t = text;
  auto positive = [](const char* name, int64_t v) -> Status {
    if (v <= 0) return InvalidArgument(std::string("'") + name + "' must be positive, got " + std::to_string(v));
    return Status::Ok();
  };
  PHI4MM_RETURN_IF_ERROR(positive("vocab_size", t.vocab_size));
  PHI4MM_RETURN_IF_ERROR(positive("hidden_size", t.hidden_size));
  PHI4MM_RETURN_IF_ERROR(positive("intermediate_size", t.intermediate_size));
  PHI4MM_RETURN_IF_ERROR(positive("num_hidden_layers", t.num_hidden_layers));
  PHI4MM_RETURN_IF_ERROR(positive("num_attention_heads", t.num_attention_heads));
  PHI4MM_RETURN_IF_ERROR(positive("num_key_value_heads", t.num_key_value_heads));
  PHI4MM_RETURN_IF_ERROR(positive("head_dim", t.head_dim));
  PHI4MM_RETURN_IF_ERROR(positive("max_position_embeddings", t.max_position_embeddings));
  if (t.num_attention_heads % t.num_key_value_heads != 0)
    return InvalidArgument("num_attention_heads (" + std::to_string(t.num_attention_heads) +
                           ") must be a multiple of num_key_value_heads (" + std::to_string(t.num_key_value_heads) + ")");
  if (!(t.partial_rotary_factor > 0 && t.partial_rotary_factor <= 1))
    return InvalidArgument("partial_rotary_factor must be in (0, 1] (a rotary dimension of at most head_dim), got " +
                           json(t.partial_rotary_factor).dump());
  if (!InInt64Range(static_cast<double>(t.head_dim) * t.partial_rotary_factor))
    return InvalidArgument("head_dim (" + std::to_string(t.head_dim) + ") is too large");
  const int64_t rd = t.rotary_dim();
  if (rd <= 0 || rd % 2 != 0)
    return InvalidArgument("partial_rotary_factor " + json(t.partial_rotary_factor).dump() +
                           " gives a rotary dimension of int(head_dim * partial_rotary_factor) = int(" +
                           std::to_string(t.head_dim) + " * " + json(t.partial_rotary_factor).dump() +
                           ") = " + std::to_string(rd) +
                           "; phi4mm needs a positive even rotary dimension of at most head_dim");
  const size_t nfreq = static_cast<size_t>(rd / 2);
  if (!t.rope_short_factor.empty() || !t.rope_long_factor.empty()) {
    if (t.rope_short_factor.size() != nfreq || t.rope_long_factor.size() != nfreq)
      return InvalidArgument("longrope short_factor/long_factor must each have rotary_dim/2 = " +
                             std::to_string(nfreq) + " entries, got " + std::to_string(t.rope_short_factor.size()) +
                             " and " + std::to_string(t.rope_long_factor.size()));
    if (t.original_max_position_embeddings < 2)
      return InvalidArgument("longrope needs original_max_position_embeddings >= 2, got " +
                             std::to_string(t.original_max_position_embeddings));
  }
  if (!std::isfinite(t.rope_attention_factor) || t.rope_attention_factor <= 0)
    return InvalidArgument("the LongRoPE 'attention_factor' must be a positive finite number, got " +
                           std::to_string(t.rope_attention_factor));
  for (const LoraAdapterConfig* l : {&vision_lora, &speech_lora})
    if (l->present && l->rank <= 0) return InvalidArgument("LoRA rank must be positive");
  return Status::Ok();
}

}  // namespace phi4mm
