// Both checkpoint layouts of the tiny fixture describe the same model: every field the engine
// reads (text, LongRoPE, vision, audio, LoRA, generation, preprocessor) comes out identical, and
// matches the values the fixture generator used (docs/fixtures.md). Fields the engine implements
// one value of are refused, not ignored: the fixture's files with one field changed (or removed,
// where the reference's default differs) fail with a message naming the field and its value, and
// the released values, training-only dropouts and equivalent spellings still load.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "phi4mm/io/checkpoint.h"
#include "phi4mm/io/model_config.h"
#include "test_util.h"

namespace phi4mm {
namespace {

ModelConfig Load(const std::string& layout) {
  auto r = ModelConfig::LoadFromDir(test::FixturePath("tiny/" + layout));
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : ModelConfig{};
}

TEST(ModelConfig, BothLayoutsAgree) {
  const ModelConfig o = Load("orig"), n = Load("native");
  EXPECT_EQ(o.layout, CheckpointLayout::kOriginal);
  EXPECT_EQ(n.layout, CheckpointLayout::kNative);
  for (const ModelConfig* c : {&o, &n}) {
    const TextConfig& t = c->text;
    EXPECT_EQ(t.vocab_size, 200064);
    EXPECT_EQ(t.hidden_size, 48);
    EXPECT_EQ(t.num_attention_heads, 6);
    EXPECT_EQ(t.num_key_value_heads, 2);
    EXPECT_EQ(t.head_dim, 8);
    EXPECT_EQ(t.rotary_dim(), 6);
    EXPECT_EQ(t.num_hidden_layers, 3);
    EXPECT_EQ(t.intermediate_size, 64);
    EXPECT_TRUE(t.tie_word_embeddings);
    EXPECT_EQ(t.original_max_position_embeddings, 32);
    EXPECT_EQ(t.max_position_embeddings, 512);
    EXPECT_EQ(t.rope_short_factor, (std::vector<double>{1.0, 1.25, 1.5}));
    EXPECT_EQ(t.rope_long_factor, (std::vector<double>{1.5, 3.0, 7.5}));
    EXPECT_NEAR(t.rope_attention_factor, std::sqrt(1 + std::log(16.0) / std::log(32.0)), 1e-12);
    EXPECT_EQ(c->vision.hidden_size, 32);
    EXPECT_EQ(c->vision.num_hidden_layers, 3);
    EXPECT_EQ(c->vision.num_attention_heads, 2);
    EXPECT_EQ(c->vision.intermediate_size, 48);
    EXPECT_EQ(c->vision.crop_size, 448);
    EXPECT_EQ(c->vision.patch_size, 14);
    EXPECT_EQ(c->audio.hidden_size, 32);
    EXPECT_EQ(c->audio.num_attention_heads, 2);
    EXPECT_EQ(c->audio.num_blocks, 2);
    EXPECT_EQ(c->audio.intermediate_size, 48);
    EXPECT_EQ(c->audio.nemo_conv_channels, 16);
    EXPECT_EQ(c->audio.bias_max_distance, 500);
    EXPECT_EQ(c->audio.time_reduction, 8);
    EXPECT_EQ(c->audio.ext_pw_out_channel, 32);
    EXPECT_EQ(c->audio.depthwise_separable_out_channel, 32);
    EXPECT_EQ(c->vision_lora.rank, 4);
    EXPECT_DOUBLE_EQ(c->vision_lora.scale(), 2.0);
    EXPECT_EQ(c->speech_lora.rank, 6);
    EXPECT_DOUBLE_EQ(c->speech_lora.scale(), 0.5);
    EXPECT_EQ(c->generation.eos_token_ids, (std::vector<int32_t>{200020, 199999}));
    EXPECT_EQ(c->preprocessor.dynamic_hd, 36);
  }
}

TEST(ModelConfig, RealCheckpointDefaultsGiveTheRealAttentionFactor) {
  // The real config.json's values (reference-spec §1.1): 131072 / 4096 -> 1.1902380714238083.
  const std::string json = R"({"model_type": "phi4mm", "vocab_size": 200064, "hidden_size": 3072,
    "intermediate_size": 8192, "num_hidden_layers": 32, "num_attention_heads": 24, "num_key_value_heads": 8,
    "max_position_embeddings": 131072, "original_max_position_embeddings": 4096, "partial_rotary_factor": 0.75,
    "rope_scaling": {"type": "longrope", "short_factor": [], "long_factor": []}})";
  auto r = ModelConfig::ParseConfigJson(json, "real");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NEAR(r->text.rope_attention_factor, 1.1902380714238083, 1e-15);
  EXPECT_EQ(r->text.head_dim, 128);
  EXPECT_EQ(r->text.rotary_dim(), 96);
}

TEST(ModelConfig, BothLayoutsHoldTheSameDecoderTensors) {
  auto o = Checkpoint::Open(test::FixturePath("tiny/orig"), CheckpointLayout::kOriginal);
  auto n = Checkpoint::Open(test::FixturePath("tiny/native"), CheckpointLayout::kNative);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  size_t compared = 0;
  for (const auto& [name, t] : o->tensors()) {
    const TensorView* u = n->Find(name);
    ASSERT_NE(u, nullptr) << "native layout lacks canonical tensor " << name;
    EXPECT_EQ(t.shape, u->shape) << name;
    EXPECT_EQ(test::ToFloats(t), test::ToFloats(*u)) << name;
    ++compared;
  }
  EXPECT_EQ(compared, n->tensors().size()) << "the layouts should hold the same set of tensors";
  EXPECT_NE(o->Find("model.layers.0.self_attn.qkv_proj.lora_A.vision.weight"), nullptr);
  EXPECT_NE(o->Find("model.embed_tokens_extend.image_embed.img_projection_up.weight"), nullptr);
  EXPECT_NE(o->Find("model.embed_tokens_extend.audio_embed.encoder.encoders.0.self_attn.q_proj.weight"), nullptr);
}

using nlohmann::json;

const json kErase(json::value_t::discarded);  // as a value below: remove the key

json FixtureJson(const std::string& layout, const std::string& file) {
  return json::parse(test::ReadFile(test::FixturePath("tiny/" + layout + "/" + file)));
}

// Sets the field at JSON pointer `pointer` of `j` to `value`, or removes it for kErase.
void Edit(json& j, const std::string& pointer, const json& value) {
  const json::json_pointer ptr(pointer);
  if (value.is_discarded()) {
    j.at(ptr.parent_pointer()).erase(ptr.back());
  } else {
    j[ptr] = value;
  }
}

// The fixture's config.json of `layout` with one field edited, parsed and validated.
Status ParseEdited(const std::string& layout, const std::string& pointer, const json& value) {
  json j = FixtureJson(layout, "config.json");
  Edit(j, pointer, value);
  auto c = ModelConfig::ParseConfigJson(j.dump(), "'tiny/" + layout + "/config.json'");
  if (!c.ok()) return c.status();
  return c->Validate();
}

struct Edited {
  const char* layout;
  const char* pointer;
  json value;
  const char* field;  // the quoted key the message must name
};

void ExpectRefused(const Status& st, const Edited& e, const std::string& file, StatusCode code) {
  const std::string where = std::string(e.layout) + " " + e.pointer;
  ASSERT_FALSE(st.ok()) << where << " = " << e.value.dump() << " was accepted";
  EXPECT_EQ(st.code(), code) << where << ": " << st.ToString();
  const std::string& m = st.message();
  EXPECT_NE(m.find(file), std::string::npos) << where << ": message lacks the file: " << m;
  EXPECT_NE(m.find(e.field), std::string::npos) << where << ": message lacks " << e.field << ": " << m;
  if (e.value.is_discarded()) {
    EXPECT_NE(m.find("is absent"), std::string::npos) << where << ": " << m;
  } else {
    EXPECT_NE(m.find(e.value.dump()), std::string::npos) << where << ": message lacks the value: " << m;
  }
  EXPECT_NE(m.find("support"), std::string::npos) << where << ": message does not say what is supported: " << m;
}

TEST(ModelConfig, UnimplementedConfigFieldsAreRefused) {
  const std::vector<Edited> cases = {
      // Decoder, both layouts.
      {"orig", "/sliding_window", 511, "'sliding_window'"},
      {"native", "/sliding_window", 511, "'sliding_window'"},
      {"native", "/sliding_window", 0, "'sliding_window'"},
      {"orig", "/hidden_act", "gelu", "'hidden_act'"},
      {"native", "/hidden_act", "relu", "'hidden_act'"},
      {"orig", "/attention_bias", true, "'attention_bias'"},
      {"orig", "/mlp_bias", true, "'mlp_bias'"},
      {"orig", "/lm_head_bias", true, "'lm_head_bias'"},
      {"native", "/attention_bias", true, "'attention_bias'"},
      {"orig", "/head_dim", 16, "'head_dim'"},
      {"orig", "/full_attn_mod", 2, "'full_attn_mod'"},
      {"orig", "/interpolate_factor", 2, "'interpolate_factor'"},
      {"native", "/rope_scaling/factor", 4.0, "'factor'"},
      // Vision tower (native vision_config; the tiny original's embd_layer copy of it).
      {"native", "/vision_config/hidden_act", "gelu", "'hidden_act'"},
      {"native", "/vision_config/num_channels", 1, "'num_channels'"},
      {"native", "/vision_config/image_token_id", 5, "'image_token_id'"},
      {"orig", "/embd_layer/image_embd_layer/vision_config/hidden_act", "quick_gelu", "'hidden_act'"},
      // Original image and audio embedding kwargs.
      {"orig", "/embd_layer/image_embd_layer/hd_transform_order", "glb_sub", "'hd_transform_order'"},
      {"orig", "/embd_layer/image_embd_layer/hd_transform_order", kErase, "'hd_transform_order'"},
      {"orig", "/embd_layer/image_embd_layer/image_token_compression_cls", kErase, "'image_token_compression_cls'"},
      {"orig", "/embd_layer/image_embd_layer/use_hd_transform", false, "'use_hd_transform'"},
      {"orig", "/embd_layer/image_embd_layer/with_learnable_separator", false, "'with_learnable_separator'"},
      {"orig", "/embd_layer/image_embd_layer/projection_cls", "linear", "'projection_cls'"},
      {"orig", "/embd_layer/audio_embd_layer/projection_cls", kErase, "'projection_cls'"},
      {"orig", "/embd_layer/audio_embd_layer/downsample_rate", 2, "'downsample_rate'"},
      {"orig", "/embd_layer/audio_embd_layer/use_qformer", true, "'use_qformer'"},
      {"orig", "/embd_layer/audio_embd_layer/use_conv_downsample", true, "'use_conv_downsample'"},
      {"orig", "/img_processor/layer_idx", -1, "'layer_idx'"},
      {"orig", "/img_processor/type_feature", "cls_patch", "'type_feature'"},
      // Original Conformer (ConformerEncoder's defaults apply to absent keys).
      {"orig", "/audio_processor/name", "whisper", "'name'"},
      {"orig", "/audio_processor/config/activation", "relu", "'activation'"},
      {"orig", "/audio_processor/config/activation", kErase, "'activation'"},
      {"orig", "/audio_processor/config/conv_activation", "relu", "'conv_activation'"},
      {"orig", "/audio_processor/config/conv_glu_type", kErase, "'conv_glu_type'"},
      {"orig", "/audio_processor/config/bias_in_glu", false, "'bias_in_glu'"},
      {"orig", "/audio_processor/config/causal", false, "'causal'"},
      {"orig", "/audio_processor/config/batch_norm", true, "'batch_norm'"},
      {"orig", "/audio_processor/config/input_layer", "conv2d", "'input_layer'"},
      {"orig", "/audio_processor/config/ext_pw_kernel_size", 3, "'ext_pw_kernel_size'"},
      {"orig", "/audio_processor/config/linear_glu_in_convm", true, "'linear_glu_in_convm'"},
      {"orig", "/audio_processor/config/chunk_se", 1, "'chunk_se'"},
      {"orig", "/audio_processor/config/export", true, "'export'"},
      {"orig", "/audio_processor/config/attention_group_size", 2, "'attention_group_size'"},
      {"orig", "/audio_processor/config/conv2d_extra_padding", "feat", "'conv2d_extra_padding'"},
      {"orig", "/audio_processor/config/use_pt_scaled_dot_product_attention", true,
       "'use_pt_scaled_dot_product_attention'"},
      {"orig", "/audio_processor/config/nemo_conv_settings/subsampling", "striding", "'subsampling'"},
      {"orig", "/audio_processor/config/nemo_conv_settings/is_causal", true, "'is_causal'"},
      {"orig", "/audio_processor/config/relative_attention_bias_args/type", "alibi", "'type'"},
      {"orig", "/audio_processor/config/relative_attention_bias_args/t5_bias_symmetric", true,
       "'t5_bias_symmetric'"},
      {"orig", "/audio_processor/config/relative_attention_bias_args", kErase, "'relative_attention_bias_args'"},
      // Native Conformer.
      {"native", "/audio_config/activation", "relu", "'activation'"},
      {"native", "/audio_config/conv_activation", "gelu", "'conv_activation'"},
      {"native", "/audio_config/conv_glu_type", "sigmoid", "'conv_glu_type'"},
      {"native", "/audio_config/nemo_activation", "silu", "'nemo_activation'"},
      {"native", "/audio_config/bias_symmetric", true, "'bias_symmetric'"},
      {"native", "/audio_config/downsample_rate", 2, "'downsample_rate'"},
      {"native", "/audio_config/audio_token_id", 7, "'audio_token_id'"},
      // LoRA variants written into the original's adapter entries.
      {"orig", "/vision_lora/use_rslora", true, "'use_rslora'"},
  };
  for (const Edited& e : cases)
    ExpectRefused(ParseEdited(e.layout, e.pointer, e.value), e, "tiny/" + std::string(e.layout) + "/config.json",
                  StatusCode::kUnsupported);
}

TEST(ModelConfig, InconsistentDecoderShapesAreRefused) {
  // num_key_value_heads must divide num_attention_heads (6); the rotary dimension
  // int(head_dim * partial_rotary_factor) must be even and at most head_dim (8).
  const std::vector<Edited> cases = {
      {"orig", "/num_key_value_heads", 4, "num_key_value_heads"},
      {"native", "/num_key_value_heads", 5, "num_key_value_heads"},
      {"orig", "/partial_rotary_factor", 0.625, "partial_rotary_factor"},
      {"native", "/partial_rotary_factor", 1.25, "partial_rotary_factor"},
  };
  for (const Edited& e : cases) {
    const Status st = ParseEdited(e.layout, e.pointer, e.value);
    ASSERT_FALSE(st.ok()) << e.pointer;
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
    EXPECT_NE(st.message().find(e.field), std::string::npos) << st.message();
    EXPECT_NE(st.message().find(e.value.dump()), std::string::npos) << st.message();
  }
}

TEST(ModelConfig, RopeParametersMustBeUnambiguous) {
  json j = FixtureJson("native", "config.json");
  j["rope_scaling"]["partial_rotary_factor"] = 0.5;
  auto c = ModelConfig::ParseConfigJson(j.dump(), "cfg");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("'partial_rotary_factor' = 0.5 disagrees"), std::string::npos)
      << c.status().message();

  j = FixtureJson("orig", "config.json");
  j["rope_scaling"].erase("type");
  c = ModelConfig::ParseConfigJson(j.dump(), "cfg");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("no 'type'"), std::string::npos) << c.status().message();

  // An explicit attention_factor is used as given, so a non-positive one is an error, not a default.
  j = FixtureJson("native", "config.json");
  j["rope_scaling"]["attention_factor"] = -1.0;
  c = ModelConfig::ParseConfigJson(j.dump(), "cfg");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const Status st = c->Validate();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("'attention_factor'"), std::string::npos) << st.message();
}

TEST(ModelConfig, TrainingOnlyAndEquivalentValuesLoad) {
  const std::vector<Edited> cases = {
      {"orig", "/resid_pdrop", 0.1, ""},
      {"orig", "/embd_pdrop", 0.2, ""},
      {"orig", "/attention_dropout", 0.3, ""},
      {"native", "/resid_pdrop", 0.1, ""},
      {"native", "/embd_pdrop", 0.2, ""},
      {"native", "/attention_dropout", 0.3, ""},
      {"native", "/vision_config/attention_dropout", 0.1, ""},
      {"native", "/audio_config/dropout_rate", 0.1, ""},
      {"orig", "/audio_processor/config/dropout_rate", 0.1, ""},
      {"orig", "/speech_lora/dp", 0.05, ""},
      {"orig", "/sliding_window", 512, ""},  // = max_position_embeddings: the window never binds
      {"native", "/sliding_window", nullptr, ""},
      {"native", "/sliding_window", kErase, ""},
      {"orig", "/hidden_act", "swish", ""},
      {"native", "/hidden_act", kErase, ""},
      {"orig", "/attention_bias", kErase, ""},
      {"orig", "/head_dim", 8, ""},
      {"native", "/rope_scaling/factor", 16.0, ""},  // = 512 / 32
      {"native", "/audio_config/activation", "silu", ""},
      {"orig", "/audio_processor/config/export", false, ""},
  };
  for (const Edited& e : cases) {
    const Status st = ParseEdited(e.layout, e.pointer, e.value);
    EXPECT_TRUE(st.ok()) << e.layout << " " << e.pointer << " = " << e.value.dump() << ": " << st.ToString();
  }
  // transformers v5's rope_parameters, with the rotary fraction and the original context inside.
  json j = FixtureJson("native", "config.json");
  json rope = j["rope_scaling"];
  rope.erase("type");
  rope["rope_type"] = "longrope";
  rope["rope_theta"] = j["rope_theta"];
  rope["partial_rotary_factor"] = j["partial_rotary_factor"];
  rope["original_max_position_embeddings"] = j["original_max_position_embeddings"];
  for (const char* key : {"rope_scaling", "rope_theta", "partial_rotary_factor", "original_max_position_embeddings"})
    j.erase(key);
  j["rope_parameters"] = rope;
  auto c = ModelConfig::ParseConfigJson(j.dump(), "v5");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE(c->Validate().ok()) << c->Validate().ToString();
  EXPECT_EQ(c->text.rotary_dim(), 6);
  EXPECT_EQ(c->text.original_max_position_embeddings, 32);
  EXPECT_NEAR(c->text.rope_attention_factor, std::sqrt(1 + std::log(16.0) / std::log(32.0)), 1e-12);
}

TEST(ModelConfig, TheReleasedConfigLoads) {
  // The released original config (reference-spec §1.1): sliding_window 262144 exceeds
  // max_position_embeddings 131072, so it never binds.
  json j = json::parse(R"({"model_type": "phi4mm", "vocab_size": 200064, "hidden_size": 3072,
    "intermediate_size": 8192, "num_hidden_layers": 32, "num_attention_heads": 24, "num_key_value_heads": 8,
    "hidden_act": "silu", "rms_norm_eps": 1e-05, "tie_word_embeddings": true, "max_position_embeddings": 131072,
    "original_max_position_embeddings": 4096, "rope_theta": 10000.0, "partial_rotary_factor": 0.75,
    "sliding_window": 262144, "attention_bias": false, "mlp_bias": false, "lm_head_bias": false,
    "full_attn_mod": 1, "interpolate_factor": 1, "embd_pdrop": 0.0, "resid_pdrop": 0.0, "attention_dropout": 0.0,
    "initializer_range": 0.02, "use_cache": true, "bos_token_id": 199999, "eos_token_id": 199999,
    "pad_token_id": 199999,
    "embd_layer": {"embedding_cls": "image_audio",
      "image_embd_layer": {"crop_size": 448, "embedding_cls": "tune_image", "enable_gradient_checkpointing": true,
        "hd_transform_order": "sub_glb", "image_token_compression_cls": "avg_pool_2d", "projection_cls": "mlp",
        "use_hd_transform": true, "with_learnable_separator": true},
      "audio_embd_layer": {"compression_rate": 8, "downsample_rate": 1, "embedding_cls": "audio",
        "enable_gradient_checkpointing": true, "projection_cls": "mlp", "use_conv_downsample": false,
        "use_qformer": false}},
    "audio_processor": {"name": "cascades", "config": {"activation": "swish",
      "activation_checkpointing": {"interval": 1, "module": "transformer", "offload": false},
      "attention_dim": 1024, "attention_heads": 16, "batch_norm": false, "bias_in_glu": true, "causal": true,
      "chunk_size": -1, "cnn_layer_norm": true, "conv_activation": "swish", "conv_glu_type": "swish",
      "depthwise_multiplier": 1, "depthwise_seperable_out_channel": 1024, "dropout_rate": 0.0,
      "encoder_embedding_config": {"input_size": 80}, "ext_pw_kernel_size": 1, "ext_pw_out_channel": 1024,
      "input_layer": "nemo_conv", "input_size": 80, "kernel_size": 3, "left_chunk": 18, "linear_units": 1536,
      "nemo_conv_settings": {"conv_channels": 1024}, "num_blocks": 24,
      "relative_attention_bias_args": {"t5_bias_max_distance": 500, "type": "t5"}, "time_reduction": 8}},
    "vision_lora": {"dp": 0.0, "lora_alpha": 512, "r": 256},
    "speech_lora": {"dp": 0.01, "lora_alpha": 640, "r": 320}})");
  j["rope_scaling"] = {{"type", "longrope"}, {"short_factor", std::vector<double>(48, 1.0)},
                       {"long_factor", std::vector<double>(48, 2.0)}};
  auto c = ModelConfig::ParseConfigJson(j.dump(), "released");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE(c->Validate().ok()) << c->Validate().ToString();
  EXPECT_EQ(c->text.max_position_embeddings, 131072);
  EXPECT_EQ(c->audio.bias_max_distance, 500);
  EXPECT_EQ(c->vision_lora.rank, 256);
}

// A folder with the fixture's JSON files of `layout` (no weights): what LoadFromDir reads.
std::string JsonOnlyCopy(const std::string& layout, const std::string& name) {
  namespace fs = std::filesystem;
  const std::string dir = test::TempDir(name);
  const fs::path from = test::FixturePath("tiny/" + layout);
  for (const char* f : {"config.json", "generation_config.json", "preprocessor_config.json",
                        "vision-lora/adapter_config.json", "speech-lora/adapter_config.json"}) {
    if (!fs::exists(from / f)) continue;
    fs::create_directories((fs::path(dir) / f).parent_path());
    fs::copy_file(from / f, fs::path(dir) / f);
  }
  return dir;
}

// LoadFromDir on a copy whose `file` has one field edited.
Status LoadEdited(const Edited& e, const std::string& file) {
  const std::string dir = JsonOnlyCopy(e.layout, "cfg_edit");
  const std::string path = dir + "/" + file;
  json j = json::parse(test::ReadFile(path));
  Edit(j, e.pointer, e.value);
  test::WriteFile(path, j.dump(2));
  return ModelConfig::LoadFromDir(dir).status();
}

TEST(ModelConfig, ProcessorConstantsAndPeftVariantsAreRefused) {
  for (const char* layout : {"orig", "native"})
    ASSERT_TRUE(ModelConfig::LoadFromDir(JsonOnlyCopy(layout, "cfg_plain")).ok()) << layout;
  const std::vector<Edited> pre = {
      {"orig", "/audio_feat_stride", 2, "'audio_feat_stride'"},
      {"native", "/sampling_rate", 8000, "'sampling_rate'"},
      {"native", "/feature_size", 128, "'feature_size'"},
      {"native", "/n_fft", 400, "'n_fft'"},
      {"native", "/hop_length", 320, "'hop_length'"},
      {"native", "/win_length", 512, "'win_length'"},
      {"native", "/preemphasis", 0.9, "'preemphasis'"},
      {"native", "/mel_min_frequency", 20, "'mel_min_frequency'"},
      {"native", "/mel_max_frequency", 8000, "'mel_max_frequency'"},
      {"native", "/do_convert_rgb", false, "'do_convert_rgb'"},
      {"native", "/do_rescale", false, "'do_rescale'"},
      {"native", "/rescale_factor", 1.0, "'rescale_factor'"},
      {"native", "/do_normalize", false, "'do_normalize'"},
      {"native", "/image_mean", json::array({0.48145466, 0.4578275, 0.40821073}), "'image_mean'"},
      {"native", "/image_std", json::array({0.26862954, 0.26130258, 0.27577711}), "'image_std'"},
  };
  for (const Edited& e : pre)
    ExpectRefused(LoadEdited(e, "preprocessor_config.json"), e, "preprocessor_config.json", StatusCode::kUnsupported);
  const std::vector<Edited> peft = {
      {"native", "/use_rslora", true, "'use_rslora'"},
      {"native", "/use_dora", true, "'use_dora'"},
      {"native", "/use_qalora", true, "'use_qalora'"},
      {"native", "/peft_type", "IA3", "'peft_type'"},
      {"native", "/bias", "all", "'bias'"},
      {"native", "/lora_bias", true, "'lora_bias'"},
      {"native", "/fan_in_fan_out", true, "'fan_in_fan_out'"},
      {"native", "/rank_pattern", json{{"qkv_proj", 8}}, "'rank_pattern'"},
      {"native", "/alpha_pattern", json{{"qkv_proj", 16}}, "'alpha_pattern'"},
      {"native", "/modules_to_save", json::array({"lm_head"}), "'modules_to_save'"},
      {"native", "/layers_to_transform", json::array({0}), "'layers_to_transform'"},
      {"native", "/layer_replication", json::array({json::array({0, 2})}), "'layer_replication'"},
      {"native", "/trainable_token_indices", json::array({5}), "'trainable_token_indices'"},
      {"native", "/target_parameters", json::array({"w"}), "'target_parameters'"},
  };
  for (const Edited& e : peft)
    ExpectRefused(LoadEdited(e, "vision-lora/adapter_config.json"), e, "vision-lora/adapter_config.json",
                  StatusCode::kUnsupported);
  const std::vector<Edited> accepted = {
      {"native", "/lora_dropout", 0.1, ""},
      {"native", "/inference_mode", true, ""},
      {"native", "/rank_pattern", nullptr, ""},
      {"native", "/use_rslora", kErase, ""},
  };
  for (const Edited& e : accepted) {
    const Status st = LoadEdited(e, "speech-lora/adapter_config.json");
    EXPECT_TRUE(st.ok()) << e.pointer << ": " << st.ToString();
  }
  const Edited padding{"native", "/padding_value", 1.0, ""};
  EXPECT_TRUE(LoadEdited(padding, "preprocessor_config.json").ok());
}

}  // namespace
}  // namespace phi4mm
