// Parsing of config.json (both layouts), generation_config.json, preprocessor_config.json and the
// native layout's PEFT adapter_config.json files, with validation.
#include "phi4mm/io/model_config.h"

#include <cmath>

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

  // rope_scaling (4.x and the original) or rope_parameters (transformers v5).
  const char* rope_key = j.contains("rope_scaling") ? "rope_scaling" : "rope_parameters";
  if (j.contains(rope_key) && !j[rope_key].is_null()) {
    const json& rs = j[rope_key];
    if (!rs.is_object()) return InvalidArgument(label + ": '" + rope_key + "' should be an object");
    Reader rr(rs, label + " " + rope_key);
    std::string type;
    rr.String("type", &type);
    rr.String("rope_type", &type);
    if (rs.contains("rope_theta")) rr.Double("rope_theta", &t->rope_theta);
    PHI4MM_RETURN_IF_ERROR(rr.status());
    if (type == "longrope" || type == "su") {
      rr.Doubles("short_factor", &t->rope_short_factor);
      rr.Doubles("long_factor", &t->rope_long_factor);
      double attention_factor = -1;
      rr.Double("attention_factor", &attention_factor);
      PHI4MM_RETURN_IF_ERROR(rr.status());
      if (attention_factor > 0) {
        t->rope_attention_factor = attention_factor;
      } else if (t->original_max_position_embeddings > 0) {
        // HF _compute_longrope_parameters: factor = max / original; sqrt(1 + ln f / ln original).
        const double factor = static_cast<double>(t->max_position_embeddings) /
                              static_cast<double>(t->original_max_position_embeddings);
        t->rope_attention_factor =
            factor <= 1.0 ? 1.0
                          : std::sqrt(1.0 + std::log(factor) /
                                                std::log(static_cast<double>(t->original_max_position_embeddings)));
      }
    } else if (!type.empty() && type != "default") {
      return Unsupported(label + ": rope scaling type '" + type + "' is not supported (expected longrope)");
    }
  }
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
  return r.status();
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
  return r.status();
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
  if (j.contains("nemo_conv_settings") && j["nemo_conv_settings"].is_object()) {
    Reader n(j["nemo_conv_settings"], label + " nemo_conv_settings");
    n.Int("conv_channels", &a->nemo_conv_channels);
    PHI4MM_RETURN_IF_ERROR(n.status());
  }
  if (j.contains("relative_attention_bias_args") && j["relative_attention_bias_args"].is_object()) {
    Reader b(j["relative_attention_bias_args"], label + " relative_attention_bias_args");
    b.Int("t5_bias_max_distance", &a->bias_max_distance);
    PHI4MM_RETURN_IF_ERROR(b.status());
  }
  return Status::Ok();
}

Status ReadLora(const json& j, const std::string& label, LoraAdapterConfig* l) {
  Reader r(j, label);
  r.Int("r", &l->rank);
  r.Double("lora_alpha", &l->alpha);
  PHI4MM_RETURN_IF_ERROR(r.status());
  if (l->rank <= 0) return InvalidArgument(label + ": LoRA rank 'r' must be a positive integer");
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
        Reader ir(e["image_embd_layer"], label + " embd_layer.image_embd_layer");
        ir.Int("crop_size", &c.vision.crop_size);
        PHI4MM_RETURN_IF_ERROR(ir.status());
        c.vision.image_size = c.vision.crop_size;
        // The original hard-codes SigLIP-so400m (get_siglip_vision_model); small test checkpoints
        // describe their tower in embd_layer.image_embd_layer.vision_config (docs/fixtures.md).
        const json& ie = e["image_embd_layer"];
        if (ie.contains("vision_config") && ie["vision_config"].is_object())
          PHI4MM_RETURN_IF_ERROR(ReadVisionNative(ie["vision_config"], label + " embd_layer.image_embd_layer.vision_config",
                                                  &c.vision));
      }
    }
    if (j.contains("audio_processor") && j["audio_processor"].is_object()) {
      const json& ap = j["audio_processor"];
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
  if (t.partial_rotary_factor <= 0 || t.partial_rotary_factor > 1)
    return InvalidArgument("partial_rotary_factor must be in (0, 1], got " + std::to_string(t.partial_rotary_factor));
  if (!InInt64Range(static_cast<double>(t.head_dim) * t.partial_rotary_factor))
    return InvalidArgument("head_dim (" + std::to_string(t.head_dim) + ") is too large");
  const int64_t rd = t.rotary_dim();
  if (rd <= 0 || rd % 2 != 0)
    return InvalidArgument("head_dim * partial_rotary_factor = " + std::to_string(rd) + " must be a positive even number");
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
    return InvalidArgument("the LongRoPE attention factor must be a positive finite number, got " +
                           std::to_string(t.rope_attention_factor));
  for (const LoraAdapterConfig* l : {&vision_lora, &speech_lora})
    if (l->present && l->rank <= 0) return InvalidArgument("LoRA rank must be positive");
  return Status::Ok();
}

}  // namespace phi4mm
