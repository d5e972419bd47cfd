// Vision parity with transformers on the tiny fixtures (tests/fixtures/tiny/reference/vision/,
// made by tools/reference/make_vision_fixtures.py), in both checkpoint layouts: the NaViT position
// buckets against torch's float32 arange/bucketize; per image the encoder's feature layer, the
// 2x2-pooled crops, the separated sub_glb sequence and the projected features; and end to end
// (vision LoRA) the prefill and greedy-step logits and tokens of a prompt with one image and of a
// prompt with two images. Tolerance: max abs error <= 1e-4 x the reference tensor's max abs value.
//
// The two-image prompt is 1109 tokens and the tiny config's max_position_embeddings is 512, a
// limit transformers does not enforce (its rotary tables are computed for any position). That case
// runs on a copy of the checkpoint whose config.json raises max_position_embeddings to 2048 and
// pins rope_scaling.attention_factor to the value the stock config derives, so the arithmetic is
// the reference's.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "phi4mm/kernels/vision_ops.h"
#include "phi4mm/models/vision.h"
#include "phi4mm/models/vision_position.h"
#include "phi4mm/runtime/chat.h"
#include "phi4mm/runtime/session.h"
#include "test_util.h"

namespace phi4mm {
namespace {

using test::FixturePath;

constexpr double kRelTol = 1e-4;
const char kDir[] = "tiny/reference/vision/";

const nlohmann::json& Index() {
  static const nlohmann::json index = [] {
    std::ifstream in(FixturePath(std::string(kDir) + "cases.json"));
    return nlohmann::json::parse(in);
  }();
  return index;
}

const SafetensorsFile& Images() {
  static SafetensorsFile* f = [] {
    auto r = SafetensorsFile::Open(FixturePath(std::string(kDir) + "images.safetensors"));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return new SafetensorsFile(std::move(r).value());
  }();
  return *f;
}

const TensorView& Ref(const std::string& name) {
  const auto& t = Images().tensors();
  auto it = t.find(name);
  if (it == t.end()) ADD_FAILURE() << "missing reference tensor " << name;
  return it == t.end() ? t.begin()->second : it->second;
}

// The processor outputs of image `key`, rebuilt bit for bit (uint8 codes through pixel_lut, or
// the float16 values the reference model was fed).
ProcessedImage LoadImage(const std::string& key) {
  const std::vector<float> lut = test::ToFloats(Ref("pixel_lut"));
  const std::vector<int64_t> sizes = test::ToInts(Ref(key + ".image_sizes"));
  const std::vector<int64_t> mask = test::ToInts(Ref(key + ".attention_mask"));
  ProcessedImage img;
  img.crop_size = 448;
  img.patches_per_side = 32;
  img.num_crops = static_cast<int64_t>(mask.size()) / (32 * 32);
  img.hd_height = sizes[0];
  img.hd_width = sizes[1];
  img.num_tokens = test::ToInts(Ref(key + ".num_img_tokens"))[0];
  for (int64_t v : mask) img.attention_mask.push_back(static_cast<uint8_t>(v));
  const auto& t = Images().tensors();
  for (int64_t c = 0; c < img.num_crops; ++c) {
    const std::string base = key + ".crop." + std::to_string(c);
    if (auto it = t.find(base + ".u8"); it != t.end()) {
      EXPECT_EQ(it->second.dtype, DType::kU8);
      for (size_t i = 0; i < it->second.nbytes; ++i) img.pixel_values.push_back(lut[it->second.data[i]]);
    } else {
      const std::vector<float> v = test::ToFloats(Ref(base + ".f16"));
      img.pixel_values.insert(img.pixel_values.end(), v.begin(), v.end());
    }
  }
  EXPECT_EQ(img.pixel_values.size(), static_cast<size_t>(img.num_crops * 3 * 448 * 448));
  return img;
}

std::shared_ptr<const Model> LoadModel(const std::string& dir) {
  static std::map<std::string, std::shared_ptr<const Model>> cache;
  auto& m = cache[dir];
  if (!m) {
    auto r = Model::Load(dir);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (r.ok()) m = *r;
  }
  return m;
}

// A copy of tiny/<layout> whose context is 2048 positions (see the file comment).
std::string LongContextCopy(const std::string& layout) {
  static std::map<std::string, std::string> done;
  if (done.count(layout)) return done[layout];
  auto stock = LoadModel(FixturePath("tiny/" + layout));
  const std::string dir = test::TempDir("vision_long_ctx_" + layout);
  test::CopyDir(FixturePath("tiny/" + layout), dir);
  nlohmann::json cfg = nlohmann::json::parse(test::ReadFile(dir + "/config.json"));
  cfg["max_position_embeddings"] = 2048;
  cfg["rope_scaling"]["attention_factor"] = stock->config().text.rope_attention_factor;
  test::WriteFile(dir + "/config.json", cfg.dump(2));
  return done[layout] = dir;
}

double g_worst_rel = 0;

void ExpectClose(const float* got, size_t n, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(n, want.size()) << what;
  const double scale = std::max(1e-6, test::MaxAbs(want));
  const double err = test::MaxAbsDiff(std::vector<float>(got, got + n), want);
  g_worst_rel = std::max(g_worst_rel, err / scale);
  std::printf("[vision] %-44s max abs err %.3g, scale %.3g, rel %.3g\n", what.c_str(), err, scale, err / scale);
  EXPECT_LE(err, kRelTol * scale) << what << ": max abs error " << err << " vs scale " << scale;
}

TEST(VisionPosition, BucketsMatchTorch) {
  const std::vector<int64_t> table = test::ToInts(Ref("navit_buckets"));  // [32, 32], row n-1, -1 padded
  ASSERT_EQ(table.size(), 32u * 32u);
  for (int64_t n = 1; n <= 32; ++n) {
    const std::vector<int64_t> got = NavitBucketCoords(n, 32);
    std::vector<int64_t> want(table.begin() + (n - 1) * 32, table.begin() + (n - 1) * 32 + n);
    EXPECT_EQ(got, want) << "valid = " << n;
  }
  // A full crop numbers its patches row-major.
  const std::vector<int64_t> ids = NavitPositionIds(32, 32, 32);
  for (int64_t i = 0; i < 1024; ++i) ASSERT_EQ(ids[i], i);
}

TEST(VisionOps, AvgPoolReflectsOddSizes) {
  // 3x3 map, one channel: padded by reflection to [[1 2 3 2] [4 5 6 5] [7 8 9 8] [4 5 6 5]].
  const std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  std::vector<float> out(4);
  AvgPool2x2(x.data(), 1, 3, 3, 1, out.data(), nullptr);
  EXPECT_EQ(out, (std::vector<float>{3, 4, 6, 7}));
}

TEST(VisionOps, AttentionIgnoresMaskedKeys) {
  // One sequence of 3 positions, one head of dim 1: key 2 is masked, so its huge value is unseen.
  const std::vector<float> q = {1, 1, 1}, k = {0, 0, 0}, v = {2, 4, 1000};
  const std::vector<uint8_t> valid = {1, 1, 0};
  std::vector<float> out(3);
  BidirectionalAttention(q.data(), k.data(), v.data(), valid.data(), {1, 3, 1, 1, 1.0f}, out.data(), nullptr);
  EXPECT_EQ(out, (std::vector<float>{3, 3, 3}));
  const std::vector<uint8_t> none = {0, 0, 0};  // no valid key: uniform over all (finfo.min mask semantics)
  BidirectionalAttention(q.data(), k.data(), v.data(), none.data(), {1, 3, 1, 1, 1.0f}, out.data(), nullptr);
  EXPECT_NEAR(out[0], 1006.0f / 3.0f, 1e-3);
}

TEST(VisionErrors, RejectsInconsistentImages) {
  auto model = LoadModel(FixturePath("tiny/native"));
  ASSERT_NE(model, nullptr);
  auto vision = VisionModel::Load(model->checkpoint(), model->config());
  ASSERT_TRUE(vision.ok()) << vision.status().ToString();
  const ProcessedImage good = LoadImage("A");
  auto expect_invalid = [&](const ProcessedImage& img, const std::string& needle) {
    auto r = (*vision)->Encode(img, model->pool(), nullptr, "");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  };
  ProcessedImage bad = good;
  bad.num_tokens += 1;
  expect_invalid(bad, "placeholder tokens");
  bad = good;
  bad.attention_mask[1 * 1024 + 5] = 0;  // a hole in a valid row of the HD crop
  expect_invalid(bad, "top-left rectangle");
  bad = good;
  bad.hd_width = 896;  // a 1x2 grid needs 3 crops
  expect_invalid(bad, "crops");
  bad = good;
  bad.pixel_values.pop_back();
  expect_invalid(bad, "pixel_values");
}

class VisionFeatures : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(VisionFeatures, MatchTransformers) {
  const auto& [layout, key] = GetParam();
  auto model = LoadModel(FixturePath("tiny/" + layout));
  ASSERT_NE(model, nullptr);
  auto vision = VisionModel::Load(model->checkpoint(), model->config());
  ASSERT_TRUE(vision.ok()) << vision.status().ToString();
  const ProcessedImage img = LoadImage(key);
  test::MemoryTap tap;
  auto feats = (*vision)->Encode(img, model->pool(), &tap, "image.0.");
  ASSERT_TRUE(feats.ok()) << feats.status().ToString();
  g_worst_rel = 0;
  const std::string tag = layout + " " + key + " ";
  const auto& index = Index().at("images").at(key);
  // hidden_states[feature_layer] is the output of encoder layer (index - 1); last crop only.
  const int64_t layer = index["feature_hidden_state_index"].get<int64_t>() - 1;
  const auto& fl = tap.tensors.at("image.0.layer." + std::to_string(layer));
  const size_t per_crop = 1024 * 32;
  ASSERT_EQ(fl.data.size(), per_crop * static_cast<size_t>(img.num_crops));
  ExpectClose(fl.data.data() + fl.data.size() - per_crop, per_crop, test::ToFloats(Ref(key + ".feature_layer.last_crop")),
              tag + "feature layer (last crop)");
  const auto& pooled = tap.tensors.at("image.0.pooled");
  ExpectClose(pooled.data.data(), pooled.data.size(), test::ToFloats(Ref(key + ".pooled")), tag + "pooled");
  const auto& sep = tap.tensors.at("image.0.separated");
  EXPECT_EQ(sep.shape, (std::vector<int64_t>{img.num_tokens, 32}));
  ExpectClose(sep.data.data(), sep.data.size(), test::ToFloats(Ref(key + ".separated")), tag + "separated");
  ExpectClose(feats->data(), feats->size(), test::ToFloats(Ref(key + ".features")), tag + "features");
  std::printf("[vision] %s/%s: worst max-abs-error / scale = %.3g\n", layout.c_str(), key.c_str(), g_worst_rel);
}

INSTANTIATE_TEST_SUITE_P(VisionTiny, VisionFeatures,
                         ::testing::Combine(::testing::Values("orig", "native"), ::testing::Values("A", "B")),
                         [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

// The engine's layer slices: an image encoded a few encoder layers at a time (one crop in flight)
// gives Encode's features bit for bit whatever the slice size, and Step refuses to run while a
// crop is in flight.
TEST(VisionEncodeJob, LayerSlicesEqualWholeCrops) {
  auto model = LoadModel(FixturePath("tiny/orig"));
  ASSERT_NE(model, nullptr);
  auto vision = VisionModel::Load(model->checkpoint(), model->config());
  ASSERT_TRUE(vision.ok()) << vision.status().ToString();
  for (const std::string key : {"A", "B"}) {
    const auto img = std::make_shared<const ProcessedImage>(LoadImage(key));
    auto want = (*vision)->Encode(*img, model->pool(), nullptr, "");
    ASSERT_TRUE(want.ok()) << want.status().ToString();
    for (int64_t layers : {1, 2, 1000}) {
      auto job = (*vision)->StartEncode(img);
      ASSERT_TRUE(job.ok()) << job.status().ToString();
      int64_t slices = 0;
      while (!job->encoded()) {
        ASSERT_TRUE(job->StepLayers(layers, model->pool()).ok());
        ASSERT_LT(++slices, 100000);
      }
      EXPECT_GE(slices, job->crops()) << key;
      auto got = job->Finish(model->pool());
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      EXPECT_EQ(*got, *want) << "image " << key << ", " << layers << " layers per slice";
    }
    auto job = (*vision)->StartEncode(img);
    ASSERT_TRUE(job.ok());
    ASSERT_TRUE(job->StepLayers(1, model->pool()).ok());
    if (job->crops_done() == 0) {
      const Status mixed = job->Step(1, model->pool());
      EXPECT_FALSE(mixed.ok());
      EXPECT_NE(mixed.message().find("in flight"), std::string::npos) << mixed.message();
    }
  }
}

class VisionEndToEnd : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(VisionEndToEnd, MatchesTransformers) {
  const auto& [layout, name] = GetParam();
  nlohmann::json c;
  for (const auto& x : Index().at("cases"))
    if (x["name"] == name) c = x;
  ASSERT_FALSE(c.is_null()) << name;
  auto ref_file = SafetensorsFile::Open(FixturePath(std::string(kDir) + c["file"].get<std::string>()));
  ASSERT_TRUE(ref_file.ok()) << ref_file.status().ToString();
  const auto& ref = ref_file->tensors();
  const std::vector<int64_t> want_ids = test::ToInts(ref.at("input_ids"));
  const int64_t steps = c["steps"];
  const bool fits = static_cast<int64_t>(want_ids.size()) + steps <= 512;
  auto model = LoadModel(fits ? FixturePath("tiny/" + layout) : LongContextCopy(layout));
  ASSERT_NE(model, nullptr);
  auto vision = VisionModel::Load(model->checkpoint(), model->config());
  ASSERT_TRUE(vision.ok()) << vision.status().ToString();

  MediaFeatures media;
  std::vector<int32_t> counts;
  for (const auto& key : c["images"]) {
    const ProcessedImage img = LoadImage(key.get<std::string>());
    counts.push_back(static_cast<int32_t>(img.num_tokens));
    auto f = (*vision)->Encode(img, model->pool(), nullptr, "");
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    media.image.insert(media.image.end(), f->begin(), f->end());
  }
  auto ids = EncodePrompt(model->tokenizer(), c["rendered"].get<std::string>(), counts);
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  ASSERT_EQ(std::vector<int64_t>(ids->begin(), ids->end()), want_ids);

  g_worst_rel = 0;
  Session session(model);
  test::MemoryTap tap;
  session.SetTap(&tap);
  GenerateOptions opts;
  opts.max_new_tokens = steps;
  opts.stop_ids = {-1};  // record every step, as the reference did
  auto res = session.Generate(*ids, LoraMode::kVision, opts, {}, &media);
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(std::vector<int64_t>(res->tokens.begin(), res->tokens.end()), test::ToInts(ref.at("greedy")));

  const std::vector<int64_t> live = test::ToInts(ref.at("live_ids"));
  test::ExpectStepLogits(tap, ref, live, steps, kRelTol, layout + " " + name, &g_worst_rel);
  std::printf("[vision] %s/%s: worst max-abs-error / scale = %.3g over %lld steps of logits\n", layout.c_str(),
              name.c_str(), g_worst_rel, static_cast<long long>(steps));
}

INSTANTIATE_TEST_SUITE_P(VisionTiny, VisionEndToEnd,
                         ::testing::Combine(::testing::Values("orig", "native"),
                                            ::testing::Values("one_image", "two_images")),
                         [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

}  // namespace
}  // namespace phi4mm
