// Quality of the vision encoder with Q8_0 layers (what `--quant q8` and `--quant q4` load) against
// the float encoder on the tiny fixture, for a two-crop and a five-crop synthetic image: the
// encoder's feature layer and the projected features, as cosine similarity and relative RMS error
// (printed for the record), and that kNone / kBF16 load the formats they promise.
//
// Expected size of the error. Q8_0 rounds each weight to 1/127 of its 32-block's max |w|; for
// Gaussian weights that max is ~2.1 sigma, so the RMS rounding error is 2.1/127/sqrt(12) ~ 0.5% of
// sigma; the int8 activation blocks add the same again, so one linear layer's output moves by
// ~0.7% RMS. The tiny encoder has 6 linears per layer plus the projection MLP, and its random
// weights do not damp errors the way trained ones do; the bounds below allow the errors of ~8
// independent 0.7% steps (sqrt(8) x 0.7% ~ 2%) on the features and hold the cosine to 0.999,
// which is what a 2% relative RMS error implies (cos ~ 1 - e^2 / 2).
#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "phi4mm/models/vision.h"
#include "phi4mm/preprocess/image_processor.h"
#include "test_util.h"

namespace phi4mm {
namespace {

constexpr double kMaxRelRms = 0.02;
constexpr double kMinCosine = 0.999;

ProcessedImage SyntheticImage(const ModelConfig& mc, int64_t width, int64_t height, int dynamic_hd) {
  Image img;
  img.width = width;
  img.height = height;
  img.rgb.resize(static_cast<size_t>(width * height * 3));
  std::mt19937 rng(7);
  // Smooth gradients plus noise, so neighbouring patches differ but are not white noise.
  for (int64_t y = 0; y < height; ++y)
    for (int64_t x = 0; x < width; ++x)
      for (int c = 0; c < 3; ++c)
        img.rgb[static_cast<size_t>((y * width + x) * 3 + c)] =
            static_cast<uint8_t>((x * (c + 1) + y * (3 - c)) / 4 % 200 + rng() % 56);
  ImageProcessorOptions io;
  io.dynamic_hd = dynamic_hd;
  io.crop_size = mc.vision.crop_size;
  io.patch_size = mc.vision.patch_size;
  auto r = ProcessImage(img, io);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : ProcessedImage{};
}

TEST(VisionQuant, FormatsPerMode) {
  EXPECT_FALSE(VisionModel::EncoderLinearFormat(QuantMode::kNone).has_value());
  EXPECT_EQ(VisionModel::EncoderLinearFormat(QuantMode::kBF16), WeightFormat::kBF16);
  EXPECT_EQ(VisionModel::EncoderLinearFormat(QuantMode::kQ8), WeightFormat::kQ8_0);
  EXPECT_EQ(VisionModel::EncoderLinearFormat(QuantMode::kQ4), WeightFormat::kQ8_0);
}

TEST(VisionQuant, Q8EncoderStaysCloseToFloat) {
  auto model = test::TinyModel("orig");
  ASSERT_NE(model, nullptr);
  const ModelConfig& mc = model->config();
  auto f32 = VisionModel::Load(model->checkpoint(), mc, QuantMode::kNone, model->pool());
  auto q8 = VisionModel::Load(model->checkpoint(), mc, QuantMode::kQ8, model->pool());
  ASSERT_TRUE(f32.ok()) << f32.status().ToString();
  ASSERT_TRUE(q8.ok()) << q8.status().ToString();
  const int64_t S = mc.vision.crop_size;
  struct Shape {
    int64_t w, h;
    int hd;
  };
  for (const Shape& s : {Shape{S, S, 1}, Shape{S * 2 - 100, S + 150, 4}}) {
    const ProcessedImage img = SyntheticImage(mc, s.w, s.h, s.hd);
    test::MemoryTap tap_f, tap_q;
    auto want = (*f32)->Encode(img, model->pool(), &tap_f, "");
    auto got = (*q8)->Encode(img, model->pool(), &tap_q, "");
    ASSERT_TRUE(want.ok()) << want.status().ToString();
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    std::string last;
    for (const auto& [name, t] : tap_f.tensors)
      if (name.rfind("layer.", 0) == 0 && (last.empty() || std::stoi(name.substr(6)) > std::stoi(last.substr(6))))
        last = name;
    ASSERT_FALSE(last.empty());
    const test::FeatureDiff layer =
        test::CompareFeatures(tap_q.tensors.at(last).data, tap_f.tensors.at(last).data);
    const test::FeatureDiff feat = test::CompareFeatures(*got, *want);
    std::printf("[vision q8] %lld crops: feature layer cosine %.6f rel RMS %.4f; features cosine %.6f rel RMS %.4f\n",
                static_cast<long long>(img.num_crops), layer.cosine, layer.rel_rms, feat.cosine, feat.rel_rms);
    EXPECT_GE(layer.cosine, kMinCosine);
    EXPECT_LE(layer.rel_rms, kMaxRelRms);
    EXPECT_GE(feat.cosine, kMinCosine);
    EXPECT_LE(feat.rel_rms, kMaxRelRms);
  }
}

}  // namespace
}  // namespace phi4mm
