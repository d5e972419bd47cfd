// Both checkpoint layouts of the tiny fixture describe the same model: every field the engine
// reads (text, LongRoPE, vision, audio, LoRA, generation, preprocessor) comes out identical, and
// matches the values the fixture generator used (docs/fixtures.md).
#include <gtest/gtest.h>

#include <cmath>

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

}  // namespace
}  // namespace phi4mm
