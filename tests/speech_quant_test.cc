// Quality of the speech encoder with Q8_0 linears (what `--quant q8`, `q4` and `q4m` load) against
// the float encoder on the tiny fixture, for the three reference clips (the "long" one runs as two
// 500-frame chunks): the subsampling output, the encoder output and both projections, as cosine
// similarity and relative RMS error (printed for the record), and that each mode loads the formats
// it promises.
//
// Expected size of the error, as in tests/vision_quant_test.cc: Q8_0 weights and int8 activation
// blocks move one linear's output by ~0.7% RMS, and independent steps add in quadrature. The
// subsampling runs 3 linears (two pointwise convolutions and the output linear): sqrt(3) x 0.7% ~
// 1.2% (measured 1.1-1.4%), bound 2%. Up to the encoder output and the projections the path holds
// 3 + 2 x 11 linears (each tiny Conformer block: two feed-forwards of 2, q/k/v/o, three pointwise
// convolutions) + 2: sqrt(27) x 0.7% ~ 3.6% (measured 1.4-3.1%, the most on the shortest clip),
// bound 4%, and a cosine of at least 0.999 (1 - 0.04^2 / 2 = 0.9992).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "phi4mm/models/speech.h"
#include "test_util.h"

namespace phi4mm {
namespace {

constexpr double kMaxSubsampledRelRms = 0.02;
constexpr double kMaxRelRms = 0.04;
constexpr double kMinCosine = 0.999;

TEST(SpeechQuant, FormatsPerMode) {
  EXPECT_FALSE(SpeechModel::EncoderLinearFormat(QuantMode::kNone).has_value());
  EXPECT_EQ(SpeechModel::EncoderLinearFormat(QuantMode::kBF16), WeightFormat::kBF16);
  EXPECT_EQ(SpeechModel::EncoderLinearFormat(QuantMode::kQ8), WeightFormat::kQ8_0);
  EXPECT_EQ(SpeechModel::EncoderLinearFormat(QuantMode::kQ4), WeightFormat::kQ8_0);
  EXPECT_EQ(SpeechModel::EncoderLinearFormat(QuantMode::kQ4M), WeightFormat::kQ8_0);
}

TEST(SpeechQuant, Q8EncoderStaysCloseToFloat) {
  auto model = test::TinyModel("orig");
  ASSERT_NE(model, nullptr);
  auto f32 = SpeechModel::Load(model->checkpoint(), model->config(), QuantMode::kNone, model->pool());
  auto q8 = SpeechModel::Load(model->checkpoint(), model->config(), QuantMode::kQ8, model->pool());
  ASSERT_TRUE(f32.ok()) << f32.status().ToString();
  ASSERT_TRUE(q8.ok()) << q8.status().ToString();
  const std::string dir = "tiny/reference/speech/";
  std::ifstream in(test::FixturePath(dir + "cases.json"));
  const nlohmann::json clips = nlohmann::json::parse(in)["clips"];
  ASSERT_FALSE(clips.empty());
  for (const auto& [clip, info] : clips.items()) {
    auto file = SafetensorsFile::Open(test::FixturePath(dir + info["file"].get<std::string>()));
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    const AudioFeatures feats = test::ClipFeatures(file->tensors(), info["num_tokens"]);
    for (bool with_image : {false, true}) {
      test::MemoryTap tap_f, tap_q;
      auto want = (*f32)->Encode(feats, with_image, model->pool(), &tap_f, "");
      auto got = (*q8)->Encode(feats, with_image, model->pool(), &tap_q, "");
      ASSERT_TRUE(want.ok()) << want.status().ToString();
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      ASSERT_EQ(got->size(), want->size());
      const test::FeatureDiff sub =
          test::CompareFeatures(tap_q.tensors.at("subsampled").data, tap_f.tensors.at("subsampled").data);
      EXPECT_LE(sub.rel_rms, kMaxSubsampledRelRms) << clip;
      const test::FeatureDiff enc =
          test::CompareFeatures(tap_q.tensors.at("encoder_output").data, tap_f.tensors.at("encoder_output").data);
      const test::FeatureDiff feat = test::CompareFeatures(*got, *want);
      std::printf("[speech q8] %s%s: subsampled rel RMS %.4f; encoder output cosine %.6f rel RMS %.4f; features "
                  "cosine %.6f rel RMS %.4f\n",
                  clip.c_str(), with_image ? " (vision-speech projection)" : "", sub.rel_rms, enc.cosine, enc.rel_rms,
                  feat.cosine, feat.rel_rms);
      EXPECT_GE(enc.cosine, kMinCosine) << clip;
      EXPECT_LE(enc.rel_rms, kMaxRelRms) << clip;
      EXPECT_GE(feat.cosine, kMinCosine) << clip;
      EXPECT_LE(feat.rel_rms, kMaxRelRms) << clip;
      // q8 really converted: its output is not the float encoder's.
      EXPECT_GT(enc.rel_rms, 0.0) << clip << ": q8 and float gave identical encoder outputs";
    }
  }
}

}  // namespace
}  // namespace phi4mm
