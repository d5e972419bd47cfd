// The tensor manifest against the tiny fixture in both layouts: every stored tensor is in the
// manifest with its exact shape and every manifest tensor is stored, under the name and in the
// file the manifest gives for that layout; and the quantization policy the loaders use.
#include <gtest/gtest.h>

#include "phi4mm/io/checkpoint.h"
#include "phi4mm/models/tensor_manifest.h"
#include "test_util.h"

namespace phi4mm {
namespace {

class ManifestLayoutTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ManifestLayoutTest, CoversEveryTensorOfTheCheckpoint) {
  const std::string dir = test::FixturePath("tiny/" + GetParam());
  auto cfg = ModelConfig::LoadFromDir(dir);
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  auto ckpt = Checkpoint::Open(dir, cfg->layout);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  const TensorManifest m = TensorManifest::ForConfig(*cfg);
  ASSERT_EQ(m.tensors().size(), ckpt->tensors().size());
  for (const auto& [name, view] : ckpt->tensors()) {
    const TensorSpec* spec = m.Find(name);
    ASSERT_NE(spec, nullptr) << "stored tensor not in the manifest: " << ckpt->SourceName(name);
    EXPECT_EQ(spec->shape, view.LogicalShape()) << name;
  }
  for (const TensorSpec& spec : m.tensors()) {
    const TensorView* view = ckpt->Find(spec.name);
    ASSERT_NE(view, nullptr) << "manifest tensor not stored: " << spec.name;
    const StoredName stored = StoredNameIn(spec, cfg->layout);
    if (cfg->layout == CheckpointLayout::kNative && !stored.file.empty()) {
      EXPECT_EQ(CanonicalNameFromPeft(stored.key, LoraModeName(spec.adapter)), spec.name);
      EXPECT_NE(view->file.find(stored.file), std::string::npos) << view->file << " vs " << stored.file;
    } else {
      EXPECT_EQ(stored.file, "");
      EXPECT_EQ(stored.key, ckpt->SourceName(spec.name));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, ManifestLayoutTest, ::testing::Values("orig", "native"));

TEST(ManifestTest, PartsRolesAndCounts) {
  auto cfg = ModelConfig::LoadFromDir(test::FixturePath("tiny/orig"));
  ASSERT_TRUE(cfg.ok());
  const TensorManifest m = TensorManifest::ForConfig(*cfg);
  const TextConfig& t = cfg->text;
  // Per layer: 2 norms + 4 linears, each with A and B of both adapters.
  EXPECT_EQ(m.Part(ModelPart::kDecoder).size(), static_cast<size_t>(t.num_hidden_layers * (2 + 4 * 5) + 1));
  ASSERT_EQ(m.Part(ModelPart::kEmbedding).size(), 1u);
  EXPECT_EQ(m.Part(ModelPart::kEmbedding)[0]->role, TensorRole::kEmbeddingTable);
  const TensorSpec* a = m.Find("model.layers.1.self_attn.qkv_proj.lora_A.speech.weight");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->role, TensorRole::kLoraA);
  EXPECT_EQ(a->adapter, LoraMode::kSpeech);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{cfg->speech_lora.rank, t.hidden_size}));
  // The last vision layer (past feature_layer -2) and the SigLIP head are stored but not read.
  const std::string last = std::string(names::kVisionPrefix) + "img_processor.encoder.layers." +
                           std::to_string(cfg->vision.num_hidden_layers - 1) + ".mlp.fc1.weight";
  ASSERT_NE(m.Find(last), nullptr);
  EXPECT_EQ(m.Find(last)->role, TensorRole::kUnused);
  const std::string first = std::string(names::kVisionPrefix) + "img_processor.encoder.layers.0.mlp.fc1.weight";
  EXPECT_EQ(m.Find(first)->role, TensorRole::kEncoderLinear);
  EXPECT_EQ(m.Find("lm_head.weight"), nullptr);  // tied
}

TEST(ManifestTest, QuantPolicy) {
  EXPECT_FALSE(FormatFor(TensorRole::kDecoderLinear, QuantMode::kNone).has_value());
  EXPECT_EQ(FormatFor(TensorRole::kDecoderLinear, QuantMode::kQ4), WeightFormat::kQ4K);
  EXPECT_EQ(FormatFor(TensorRole::kDecoderLinear, QuantMode::kQ8), WeightFormat::kQ8_0);
  EXPECT_EQ(FormatFor(TensorRole::kEmbeddingTable, QuantMode::kQ4), WeightFormat::kQ8_0);
  EXPECT_EQ(FormatFor(TensorRole::kLmHead, QuantMode::kBF16), WeightFormat::kBF16);
  EXPECT_EQ(FormatFor(TensorRole::kLoraA, QuantMode::kQ4), WeightFormat::kQ4K);
  EXPECT_EQ(FormatFor(TensorRole::kLoraB, QuantMode::kQ4), WeightFormat::kQ4K);
  EXPECT_EQ(FormatFor(TensorRole::kLoraA, QuantMode::kQ4M), WeightFormat::kQ8_0);
  EXPECT_EQ(FormatFor(TensorRole::kLoraB, QuantMode::kQ4M), WeightFormat::kQ8_0);
  EXPECT_EQ(FormatFor(TensorRole::kLoraA, QuantMode::kQ8), WeightFormat::kBF16);
  EXPECT_EQ(FormatFor(TensorRole::kLoraB, QuantMode::kQ8), WeightFormat::kBF16);
  EXPECT_FALSE(FormatFor(TensorRole::kLoraA, QuantMode::kNone).has_value());
  EXPECT_EQ(FormatFor(TensorRole::kLoraA, QuantMode::kBF16), WeightFormat::kBF16);
  EXPECT_EQ(FormatFor(TensorRole::kEncoderLinear, QuantMode::kQ4), WeightFormat::kQ8_0);
  for (QuantMode q : {QuantMode::kNone, QuantMode::kBF16, QuantMode::kQ8, QuantMode::kQ4, QuantMode::kQ4M}) {
    EXPECT_FALSE(FormatFor(TensorRole::kParameter, q).has_value());
    EXPECT_FALSE(FormatFor(TensorRole::kUnused, q).has_value());
  }
  // q4m is q4 for every role but the adapters (8-bit in q4m, above); DecoderLinearFormat tells its
  // projections apart.
  for (TensorRole r : {TensorRole::kDecoderLinear, TensorRole::kEmbeddingTable, TensorRole::kLmHead,
                       TensorRole::kEncoderLinear})
    EXPECT_EQ(FormatFor(r, QuantMode::kQ4M), FormatFor(r, QuantMode::kQ4)) << TensorRoleName(r);
}

TEST(ManifestTest, Q4MKeepsQkvAndTheMoreBitsLayersDownAtQ8) {
  // The real model's 32 layers: 0-3, every third from 6 to 27, 28-31 (16 layers).
  std::vector<int64_t> more;
  for (int64_t l = 0; l < 32; ++l)
    if (MoreBitsLayer(l, 32)) more.push_back(l);
  EXPECT_EQ(more, (std::vector<int64_t>{0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31}));
  EXPECT_FALSE(MoreBitsLayer(0, 4));  // the trained fixture's 4 layers: 2 and 3
  EXPECT_FALSE(MoreBitsLayer(1, 4));
  EXPECT_TRUE(MoreBitsLayer(2, 4));
  EXPECT_TRUE(MoreBitsLayer(3, 4));
  for (int64_t l = 0; l < 32; ++l) {
    EXPECT_EQ(DecoderLinearFormat(QuantMode::kQ4M, DecoderProjection::kQkv, l, 32), WeightFormat::kQ8_0);
    EXPECT_EQ(DecoderLinearFormat(QuantMode::kQ4M, DecoderProjection::kO, l, 32), WeightFormat::kQ4K);
    EXPECT_EQ(DecoderLinearFormat(QuantMode::kQ4M, DecoderProjection::kGateUp, l, 32), WeightFormat::kQ4K);
    EXPECT_EQ(DecoderLinearFormat(QuantMode::kQ4M, DecoderProjection::kDown, l, 32),
              MoreBitsLayer(l, 32) ? WeightFormat::kQ8_0 : WeightFormat::kQ4K);
    for (QuantMode q : {QuantMode::kNone, QuantMode::kBF16, QuantMode::kQ8, QuantMode::kQ4})
      for (DecoderProjection p :
           {DecoderProjection::kQkv, DecoderProjection::kO, DecoderProjection::kGateUp, DecoderProjection::kDown})
        EXPECT_EQ(DecoderLinearFormat(q, p, l, 32), FormatFor(TensorRole::kDecoderLinear, q));
  }
}

}  // namespace
}  // namespace phi4mm
