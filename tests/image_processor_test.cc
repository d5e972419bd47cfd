// Image-processor parity against the original Phi4MMImageProcessor (fixtures written by
// tools/reference/make_image_fixtures.py): for every case, the crop grid, image_sizes, token count
// and attention mask are equal; the HD crops equal the reference's uint8 canvas after
// normalisation; the global view equals torch's bicubic output (every value for small crop sizes,
// a strided sample plus sums for 448), JPEG sources included (decoded with libjpeg-turbo exactly as
// Pillow does). Also: the real photo's 1745 tokens, the spec's worked examples, the extreme-aspect-ratio rejection and bad options.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "phi4mm/io/safetensors.h"
#include "phi4mm/preprocess/image.h"
#include "phi4mm/preprocess/image_processor.h"
#include "test_util.h"

namespace phi4mm {
namespace {

nlohmann::json Cases() {
  std::ifstream f(test::FixturePath("image_processor/cases.json"));
  return nlohmann::json::parse(f);
}

template <typename T>
std::vector<T> Raw(const TensorView& t) {
  std::vector<T> v(t.nbytes / sizeof(T));
  std::memcpy(v.data(), t.data, v.size() * sizeof(T));
  return v;
}

float Normalise(uint8_t u) { return (static_cast<float>(u) / 255.0f - 0.5f) / 0.5f; }

// The HD crops (pixel_values[1:]) reassembled into the [3, hd_h, hd_w] canvas layout, compared with
// the reference's uint8 canvas [hd_h, hd_w, 3] after the reference normalisation.
double MaxCanvasError(const ProcessedImage& p, const Image& canvas) {
  const int64_t S = p.crop_size, gw = p.hd_width / S;
  double max_err = 0;
  for (int64_t y = 0; y < p.hd_height; ++y) {
    for (int64_t x = 0; x < p.hd_width; ++x) {
      const int64_t crop = 1 + (y / S) * gw + x / S;
      for (int64_t c = 0; c < 3; ++c) {
        const float got = p.pixel_values[static_cast<size_t>(((crop * 3 + c) * S + y % S) * S + x % S)];
        const float want = Normalise(canvas.rgb[static_cast<size_t>((y * canvas.width + x) * 3 + c)]);
        max_err = std::max(max_err, static_cast<double>(std::fabs(got - want)));
      }
    }
  }
  return max_err;
}

TEST(ImageProcessorParity, EveryFixtureCase) {
  const nlohmann::json cases = Cases()["cases"];
  ASSERT_GE(cases.size(), 30u);
  double max_full = 0, max_canvas = 0, max_global = 0;
  for (const auto& c : cases) {
    const std::string id = c["id"];
    const std::string name = c["image"];
    SCOPED_TRACE(id);
    const Image img = test::FixtureImage("images/" + name);
    ASSERT_EQ(img.width, c["orig_size"][0].get<int64_t>());
    ASSERT_EQ(img.height, c["orig_size"][1].get<int64_t>());
    ImageProcessorOptions opts;
    opts.crop_size = c["crop_size"];
    opts.patch_size = c["patch_size"];
    opts.dynamic_hd = c["dynamic_hd"];
    auto r = ProcessImage(img, opts);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    const ProcessedImage& p = *r;
    const int64_t S = opts.crop_size, m = S / opts.patch_size;
    EXPECT_EQ(p.num_crops, c["num_crops"].get<int64_t>());
    EXPECT_EQ(p.hd_width / S, c["grid_w"].get<int64_t>());
    EXPECT_EQ(p.hd_height / S, c["grid_h"].get<int64_t>());
    EXPECT_EQ(p.hd_height, c["image_sizes"][0].get<int64_t>());
    EXPECT_EQ(p.hd_width, c["image_sizes"][1].get<int64_t>());
    EXPECT_EQ(p.num_tokens, c["num_img_tokens"].get<int64_t>());
    EXPECT_EQ(p.crop_size, S);
    EXPECT_EQ(p.patches_per_side, m);
    ASSERT_EQ(p.pixel_values.size(), static_cast<size_t>(p.num_crops * 3 * S * S));

    auto ref = SafetensorsFile::Open(test::FixturePath("image_processor/" + id + ".safetensors"));
    ASSERT_TRUE(ref.ok()) << ref.status().ToString();
    const auto& t = ref->tensors();
    const auto mask = Raw<uint8_t>(t.at("attention_mask"));
    EXPECT_EQ(mask, p.attention_mask);

    if (c["full_pixel_values"].get<bool>()) {
      const std::vector<float> want = test::ToFloats(t.at("pixel_values"));
      ASSERT_EQ(want.size(), p.pixel_values.size());
      const double err = test::MaxAbsDiff(want, p.pixel_values);
      EXPECT_EQ(err, 0.0) << "every value must match";
      max_full = std::max(max_full, err);
    } else {
      const std::vector<float> sample = test::ToFloats(t.at("global_sample"));
      const size_t stride = c["global_sample_stride"];
      const auto sums = Raw<double>(t.at("global_sums"));
      double sum = 0, sq = 0;
      for (size_t i = 0; i < static_cast<size_t>(3 * S * S); ++i) {
        sum += p.pixel_values[i];
        sq += static_cast<double>(p.pixel_values[i]) * p.pixel_values[i];
      }
      double err = 0;
      for (size_t i = 0; i < sample.size(); ++i) {
        err = std::max(err, static_cast<double>(std::fabs(sample[i] - p.pixel_values[i * stride])));
      }
      EXPECT_LE(err, 1e-6) << "global view sample";
      EXPECT_NEAR(sum, sums[0], 1e-3);
      EXPECT_NEAR(sq, sums[1], 1e-3);
      max_global = std::max(max_global, err);
    }
    if (!c["canvas"].is_null()) {
      const Image canvas = test::FixtureImage("image_processor/" + c["canvas"].get<std::string>());
      ASSERT_EQ(canvas.width, p.hd_width);
      ASSERT_EQ(canvas.height, p.hd_height);
      const double err = MaxCanvasError(p, canvas);
      EXPECT_EQ(err, 0.0) << "HD crops must equal the reference canvas";
      max_canvas = std::max(max_canvas, err);
    }
  }
  std::printf("image parity: max |diff| full pixel_values %.3g, HD canvas %.3g, global sample %.3g\n", max_full,
              max_canvas, max_global);
}

// With Pillow's own decode of the real photo as input (lossless PNG), the processor output equals
// the reference: the only difference on the JPEG path is the JPEG decoder.
TEST(ImageProcessorParity, RealPhotoFromPillowDecode) {
  const Image img = test::FixtureImage("image_processor/pil_rgb_pipeline-cat-chonk.png");
  ASSERT_EQ(img.width, 960);
  ASSERT_EQ(img.height, 686);
  auto r = ProcessImage(img, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto ref = SafetensorsFile::Open(test::FixturePath("image_processor/pipeline-cat-chonk_c448_d36.safetensors"));
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  const auto means = Raw<double>(ref->tensors().at("crop_channel_means"));
  const std::vector<float> sample = test::ToFloats(ref->tensors().at("global_sample"));
  const size_t stride = static_cast<size_t>(3 * 448 * 448) / 4099;
  double err = 0;
  for (size_t i = 0; i < sample.size(); ++i) {
    err = std::max(err, static_cast<double>(std::fabs(sample[i] - r->pixel_values[i * stride])));
  }
  EXPECT_LE(err, 1e-6);
  for (int64_t k = 0; k < r->num_crops * 3; ++k) {
    double s = 0;
    for (int64_t i = 0; i < 448 * 448; ++i) s += r->pixel_values[static_cast<size_t>(k * 448 * 448 + i)];
    EXPECT_NEAR(s / (448.0 * 448.0), means[static_cast<size_t>(k)], 1e-6) << "crop " << k / 3;
  }
}

TEST(ImageProcessor, RealPhotoTakes1745Tokens) {
  const Image img = test::FixtureImage("images/pipeline-cat-chonk.jpeg");
  ASSERT_EQ(img.width, 960);
  ASSERT_EQ(img.height, 686);
  auto r = ProcessImage(img, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->num_tokens, 1745);
  EXPECT_EQ(r->num_crops, 7);
  EXPECT_EQ(r->hd_height, 896);
  EXPECT_EQ(r->hd_width, 1344);
}

Image Flat(int64_t w, int64_t h, uint8_t v = 128) {
  Image img;
  img.width = w;
  img.height = h;
  img.rgb.assign(static_cast<size_t>(w * h * 3), v);
  return img;
}

// reference-spec §2.6 worked examples.
TEST(ImageProcessor, SpecWorkedExamples) {
  struct Ex {
    int64_t w, h, tokens, crops, hd_h, hd_w;
  };
  for (const Ex& e : {Ex{448, 448, 545, 2, 448, 448}, Ex{640, 480, 1065, 5, 896, 896},
                      Ex{1000, 1000, 2625, 10, 1344, 1344}}) {
    auto r = ProcessImage(Flat(e.w, e.h), {});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->num_tokens, e.tokens) << e.w << "x" << e.h;
    EXPECT_EQ(r->num_crops, e.crops);
    EXPECT_EQ(r->hd_height, e.hd_h);
    EXPECT_EQ(r->hd_width, e.hd_w);
  }
}

TEST(ImageProcessor, PaddingIsWhiteAndMasked) {
  auto r = ProcessImage(Flat(640, 480, 0), {});
  ASSERT_TRUE(r.ok());
  // Crop 3 (bottom-left): rows 224.. of it are padding (pad_h 224 -> 16 mask rows zero).
  const size_t crop = 3, S = 448;
  EXPECT_EQ(r->pixel_values[(crop * 3 * S + 447) * S + 0], 1.0f);
  EXPECT_EQ(r->pixel_values[(crop * 3 * S + 0) * S + 0], -1.0f);
  EXPECT_EQ(r->attention_mask[crop * 1024 + 15 * 32], 1);
  EXPECT_EQ(r->attention_mask[crop * 1024 + 16 * 32], 0);
  for (size_t i = 0; i < 1024; ++i) ASSERT_EQ(r->attention_mask[i], 1) << "global mask";
}

TEST(ImageProcessor, ExtremeAspectRatioIsRejected) {
  for (auto [w, h] : {std::pair<int64_t, int64_t>{2000, 3}, {3, 2000}, {20000, 5}}) {
    auto r = ProcessImage(Flat(w, h), {});
    ASSERT_FALSE(r.ok()) << w << "x" << h;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("aspect ratio"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(w > h ? ":1" : "1:"), std::string::npos) << r.status().message();
  }
  // 2000x100 is accepted (resized to 2240x112).
  EXPECT_TRUE(ProcessImage(Flat(2000, 100), {}).ok());
}

TEST(ImageProcessor, BadInputsAndOptions) {
  Image bad = Flat(4, 4);
  bad.rgb.pop_back();
  EXPECT_EQ(ProcessImage(bad, {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ProcessImage(Image{}, {}).status().code(), StatusCode::kInvalidArgument);
  ImageProcessorOptions o;
  o.patch_size = 15;
  EXPECT_EQ(ProcessImage(Flat(8, 8), o).status().code(), StatusCode::kInvalidArgument);
  o = {};
  o.dynamic_hd = 0;
  EXPECT_EQ(ProcessImage(Flat(8, 8), o).status().code(), StatusCode::kInvalidArgument);
  o = {};
  o.crop_size = 0;
  EXPECT_EQ(ProcessImage(Flat(8, 8), o).status().code(), StatusCode::kInvalidArgument);
}

// More crops than dynamic_hd: the grid comes from the aspect-ratio search and is capped.
TEST(ImageProcessor, GridIsCappedByDynamicHd) {
  for (int64_t dyn : {1, 4, 36}) {
    auto r = ProcessImage(Flat(3000, 3000), ImageProcessorOptions{dyn, 448, 14});
    ASSERT_TRUE(r.ok());
    EXPECT_LE(r->num_crops - 1, dyn);
  }
  auto r = ProcessImage(Flat(6000, 2000), ImageProcessorOptions{36, 448, 14});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->hd_width / 448, 9);  // ratio 3: (9, 3) is the last, largest exact-ratio grid <= 36 crops
  EXPECT_EQ(r->hd_height / 448, 3);
}

// PlanImage knows from the size alone what ProcessImage makes: the same crops and tokens, and a
// peak estimate that covers the result.
TEST(ImageProcessor, PlanFromTheSizeMatchesProcessing) {
  const std::vector<std::pair<int64_t, int64_t>> sizes = {{5, 7},     {448, 448}, {449, 448}, {1024, 768},
                                                          {300, 2000}, {2000, 300}, {1920, 1080}, {333, 4097},
                                                          {100, 2}};
  for (int64_t dyn : {1, 4, 16, 36}) {
    for (const auto& [w, h] : sizes) {
      const ImageProcessorOptions o{dyn, 448, 14};
      auto plan = PlanImage(w, h, o);
      auto full = ProcessImage(Flat(w, h), o);
      ASSERT_EQ(plan.ok(), full.ok()) << w << "x" << h << " dyn " << dyn;
      if (!full.ok()) {
        EXPECT_EQ(plan.status().message(), full.status().message());
        continue;
      }
      EXPECT_EQ(plan->num_tokens, full->num_tokens) << w << "x" << h << " dyn " << dyn;
      EXPECT_EQ(plan->num_crops, full->num_crops) << w << "x" << h << " dyn " << dyn;
      const int64_t result = static_cast<int64_t>(full->pixel_values.size() * sizeof(float) + full->attention_mask.size());
      EXPECT_EQ(plan->pixel_bytes, result);
      EXPECT_GT(plan->peak_bytes, result + w * h * 3);
    }
  }
}

}  // namespace
}  // namespace phi4mm
