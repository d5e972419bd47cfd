// Speech-part parity with transformers on the tiny fixtures (tests/fixtures/tiny/reference/speech/,
// made by tools/reference/make_speech_fixtures.py), in both checkpoint layouts:
//  * SpeechEncoderParity: per clip, the normalised input, the NeMo subsampling output, every
//    Conformer block's output, the encoder output and both projections. The "long" clip has 513
//    encoder frames, so it runs as two 500-frame chunks (the second zero-padded, padded rows
//    compared too, as the reference attends to them).
//  * SpeechEndToEnd: audio alone (speech LoRA + speech projection), two clips in one prompt, and
//    image + audio (vision LoRA + vision-speech projection, with the reference's own image
//    features): prompt ids vs EncodePrompt, input embeddings, prefill and decode logits, greedy tokens.
// Tolerance: max abs error <= 1e-4 x the reference tensor's max abs value (fp32).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "phi4mm/models/speech.h"
#include "phi4mm/runtime/chat.h"
#include "phi4mm/runtime/session.h"
#include "test_util.h"

namespace phi4mm {
namespace {

using test::FixturePath;

constexpr double kRelTol = 1e-4;
const char kDir[] = "tiny/reference/speech/";

nlohmann::json Index() {
  std::ifstream in(FixturePath(std::string(kDir) + "cases.json"));
  return nlohmann::json::parse(in);
}

std::shared_ptr<const SpeechModel> LoadSpeech(const Model& model) {
  auto r = SpeechModel::Load(model.checkpoint(), model.config());
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : nullptr;
}

double g_worst_rel = 0;

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const double scale = std::max(1e-6, test::MaxAbs(want));
  const double err = test::MaxAbsDiff(got, want);
  g_worst_rel = std::max(g_worst_rel, err / scale);
  EXPECT_LE(err, kRelTol * scale) << what << ": max abs error " << err << " vs scale " << scale;
}

std::vector<float> FirstRows(const std::vector<float>& v, int64_t rows, int64_t cols) {
  return std::vector<float>(v.begin(), v.begin() + rows * cols);
}

class SpeechEncoderParity : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(SpeechEncoderParity, MatchesTransformers) {
  const auto& [layout, clip] = GetParam();
  auto model = test::TinyModel(layout);
  ASSERT_NE(model, nullptr);
  auto speech = LoadSpeech(*model);
  ASSERT_NE(speech, nullptr);
  const nlohmann::json info = Index()["clips"][clip];
  auto file = SafetensorsFile::Open(FixturePath(std::string(kDir) + info["file"].get<std::string>()));
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  const auto& ref = file->tensors();
  const int64_t n = info["num_tokens"];
  const AudioFeatures feats = test::ClipFeatures(ref, n);
  ASSERT_EQ(feats.frames, info["frames"].get<int64_t>());

  g_worst_rel = 0;
  for (bool with_image : {false, true}) {
    test::MemoryTap tap;
    auto out = speech->Encode(feats, with_image, model->pool(), &tap, "audio.");
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    const int64_t ht = model->config().text.hidden_size;
    ASSERT_EQ(static_cast<int64_t>(out->size()), n * ht);
    const std::string proj = with_image ? "vision_speech_projection" : "speech_projection";
    ExpectClose(*out, FirstRows(test::ToFloats(ref.at(proj)), n, ht), clip + " " + proj);
    if (with_image) continue;
    std::vector<std::string> names = {"subsampled", "encoder_output"};
    if (ref.count("normalized")) names.push_back("normalized");
    for (int64_t j = 0; j < model->config().audio.num_blocks; ++j) names.push_back("block." + std::to_string(j));
    for (const std::string& name : names) {
      ASSERT_TRUE(tap.tensors.count("audio." + name)) << name;
      const test::Captured& got = tap.tensors["audio." + name];
      EXPECT_EQ(got.shape, ref.at(name).shape) << name;
      ExpectClose(got.data, test::ToFloats(ref.at(name)), clip + " " + name);
    }
  }
  std::printf("[speech] %s/%s: %lld frames -> %lld tokens, worst max-abs-error / scale = %.3g\n", layout.c_str(),
              clip.c_str(), static_cast<long long>(feats.frames), static_cast<long long>(n), g_worst_rel);
}

INSTANTIATE_TEST_SUITE_P(Speech, SpeechEncoderParity,
                         ::testing::Combine(::testing::Values("orig", "native"),
                                            ::testing::Values("short", "second", "long")),
                         [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

class SpeechEndToEnd : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(SpeechEndToEnd, MatchesTransformers) {
  const auto& [layout, name] = GetParam();
  auto model = test::TinyModel(layout);
  ASSERT_NE(model, nullptr);
  auto speech = LoadSpeech(*model);
  ASSERT_NE(speech, nullptr);
  const nlohmann::json index = Index();
  nlohmann::json c;
  for (const auto& k : index["cases"])
    if (k["name"] == name) c = k;
  ASSERT_FALSE(c.is_null()) << name;
  auto file = SafetensorsFile::Open(FixturePath(std::string(kDir) + c["file"].get<std::string>()));
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  const auto& ref = file->tensors();
  const std::vector<int64_t> live = test::ToInts(ref.at("live_ids"));

  // Prompt ids: the reference's, and what EncodePrompt makes of the rendered prompt.
  const auto image_counts = c["image_token_counts"].get<std::vector<int32_t>>();
  const auto audio_counts = c["audio_token_counts"].get<std::vector<int32_t>>();
  auto ids = EncodePrompt(model->tokenizer(), c["rendered"].get<std::string>(), image_counts, audio_counts);
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  const std::vector<int64_t> want_ids = test::ToInts(ref.at("input_ids"));
  ASSERT_EQ(std::vector<int64_t>(ids->begin(), ids->end()), want_ids);

  // Media rows: the image features from the dump, every clip encoded alone.
  const bool with_image = !image_counts.empty();
  MediaFeatures media;
  if (with_image) media.image = test::ToFloats(ref.at("image_features"));
  const auto clips = c["clips"].get<std::vector<std::string>>();
  for (size_t i = 0; i < clips.size(); ++i) {
    auto clip_file = SafetensorsFile::Open(
        FixturePath(std::string(kDir) + index["clips"][clips[i]]["file"].get<std::string>()));
    ASSERT_TRUE(clip_file.ok()) << clip_file.status().ToString();
    auto rows = speech->Encode(test::ClipFeatures(clip_file->tensors(), audio_counts[i]), with_image, model->pool(),
                               nullptr, "");
    ASSERT_TRUE(rows.ok()) << rows.status().ToString();
    media.audio.insert(media.audio.end(), rows->begin(), rows->end());
  }

  g_worst_rel = 0;
  const LoraMode mode = LoraModeForInputs(with_image, !clips.empty());
  ASSERT_STREQ(LoraModeName(mode), c["lora"].get<std::string>().c_str());
  Session session(model);
  test::MemoryTap tap;
  session.SetTap(&tap);
  GenerateOptions opts;
  const int64_t steps = c["steps"];
  opts.max_new_tokens = steps;
  opts.stop_ids = {-1};  // record every step, as the reference did
  auto res = session.Generate(*ids, mode, opts, {}, &media);
  ASSERT_TRUE(res.ok()) << res.status().ToString();

  ASSERT_TRUE(tap.tensors.count("prefill.embeds"));
  ExpectClose(tap.tensors["prefill.embeds"].data, test::ToFloats(ref.at("prefill.embeds")), name + " embeds");
  EXPECT_EQ(std::vector<int64_t>(res->tokens.begin(), res->tokens.end()), test::ToInts(ref.at("greedy"))) << name;
  test::ExpectStepLogits(tap, ref, live, steps, kRelTol, name, &g_worst_rel);
  std::printf("[speech] %s/%s: %zu prompt tokens, worst max-abs-error / scale = %.3g over embeds and %lld steps\n",
              layout.c_str(), name.c_str(), ids->size(), g_worst_rel, static_cast<long long>(steps));
}

INSTANTIATE_TEST_SUITE_P(Speech, SpeechEndToEnd,
                         ::testing::Combine(::testing::Values("orig", "native"),
                                            ::testing::Values("audio_alone", "two_clips", "image_audio")),
                         [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

// chunk_size > 0 (not used by the released model, whose chunk_size is -1): with chunks of 2
// encoder frames a frame sees its own chunk and left_chunk chunks before it. Frames 0-1 then never
// see later frames (the conv is causal): they depend on encoder frames 0-1 only, i.e. log-mel
// frames < 16. Going left, one block takes frame i back to the start of chunk(j) - left_chunk for
// the conv taps j in [i-2, i]; over the two blocks frames 8-9 reach back to encoder frame 4 with
// left_chunk 0 (so not to log-mel frames < 9) but to frame 0 with left_chunk 1. Perturbing the
// log-mel outside a dependency range must leave those outputs bit-identical; inside it (or with
// full attention) not.
TEST(SpeechStreamingMask, ChunksAndLeftChunkLimitTheContext) {
  auto model = test::TinyModel("native");
  ASSERT_NE(model, nullptr);
  ModelConfig cfg = model->config();
  cfg.audio.chunk_size = 2;
  cfg.audio.left_chunk = 0;
  auto streaming = SpeechModel::Load(model->checkpoint(), cfg);
  ASSERT_TRUE(streaming.ok()) << streaming.status().ToString();
  cfg.audio.left_chunk = 1;
  auto wider = SpeechModel::Load(model->checkpoint(), cfg);
  ASSERT_TRUE(wider.ok()) << wider.status().ToString();
  auto full = LoadSpeech(*model);
  ASSERT_NE(full, nullptr);
  auto file = SafetensorsFile::Open(FixturePath(std::string(kDir) + "clip_short.safetensors"));
  ASSERT_TRUE(file.ok());
  const AudioFeatures base = test::ClipFeatures(file->tensors(), 10);
  const int64_t d = cfg.audio.hidden_size;
  auto encode = [&](const SpeechModel& m, const AudioFeatures& f) {
    test::MemoryTap tap;
    auto r = m.Encode(f, false, model->pool(), &tap, "");
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return tap.tensors["encoder_output"].data;
  };
  auto rows = [&](const std::vector<float>& v, int64_t r0, int64_t r1) {
    return std::vector<float>(v.begin() + r0 * d, v.begin() + r1 * d);
  };
  AudioFeatures late = base, early = base;
  for (int64_t t = 24; t < base.frames; ++t)
    for (int64_t m = 0; m < 80; ++m) late.log_mel[static_cast<size_t>(t * 80 + m)] += 1.5f;
  for (int64_t t = 0; t < 9; ++t)
    for (int64_t m = 0; m < 80; ++m) early.log_mel[static_cast<size_t>(t * 80 + m)] -= 1.5f;
  const std::vector<float> s_base = encode(**streaming, base), s_late = encode(**streaming, late),
                           s_early = encode(**streaming, early);
  ASSERT_EQ(s_base.size(), static_cast<size_t>(10 * d));
  EXPECT_EQ(rows(s_base, 0, 2), rows(s_late, 0, 2));
  EXPECT_NE(rows(s_base, 2, 10), rows(s_late, 2, 10));
  EXPECT_EQ(rows(s_base, 8, 10), rows(s_early, 8, 10));
  EXPECT_NE(rows(s_base, 0, 8), rows(s_early, 0, 8));
  EXPECT_NE(rows(encode(**wider, base), 8, 10), rows(encode(**wider, early), 8, 10));
  const std::vector<float> f_base = encode(*full, base), f_late = encode(*full, late);
  EXPECT_NE(rows(f_base, 0, 2), rows(f_late, 0, 2));
}

TEST(SpeechErrors, RejectsBadFeatures) {
  auto model = test::TinyModel("native");
  ASSERT_NE(model, nullptr);
  auto speech = LoadSpeech(*model);
  ASSERT_NE(speech, nullptr);
  AudioFeatures f;
  f.frames = 16;
  f.log_mel.assign(16 * 80, 1.0f);
  f.num_tokens = 3;  // ceil(16 / 8) = 2
  auto r = speech->Encode(f, false, model->pool(), nullptr, "");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("num_tokens 3"), std::string::npos) << r.status().ToString();
  f.num_tokens = 2;
  f.num_mel = 64;
  r = speech->Encode(f, false, model->pool(), nullptr, "");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("64 mel bins"), std::string::npos) << r.status().ToString();
  f.num_mel = 80;
  f.log_mel.pop_back();
  r = speech->Encode(f, false, model->pool(), nullptr, "");
  EXPECT_FALSE(r.ok());
  f.log_mel.push_back(0.0f);
  r = speech->Encode(f, false, model->pool(), nullptr, "");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->size(), 2u * static_cast<size_t>(model->config().text.hidden_size));
}

}  // namespace
}  // namespace phi4mm
