// LoadProcessorTensors (`phi4mm run --ids ... --processor-tensors DIR`): the processor's tensors
// written in ONNX Runtime GenAI's batched layout (images padded to the most crops with all-one
// masks, clips padded to the most frames with a mask) load back into exactly what our own
// preprocessing made, so the encoders and the decoder give the same features and the same LoRA
// mode; and every inconsistent input is a clear error.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "phi4mm/io/npy.h"
#include "phi4mm/runtime/chat.h"
#include "phi4mm/runtime/media.h"
#include "phi4mm/tokenizer/chat_format.h"
#include "test_util.h"

namespace phi4mm {
namespace {

using test::FixturePath;

std::shared_ptr<const Model> Tiny() { return test::TinyModel("orig"); }

// Two images of different crop counts and one clip, preprocessed by us.
PreprocessedPrompt Ours(const Model& model) {
  MediaInputs media;
  for (const char* f : {"images/square_448.png", "images/photo_640x480.png"}) {
    auto img = DecodeImageFile(FixturePath(f));
    EXPECT_TRUE(img.ok());
    media.images.push_back(*img);
  }
  auto clip = DecodeAudioFile(FixturePath("audio/speech_16k_pcm16.wav"));
  EXPECT_TRUE(clip.ok());
  media.audios.push_back(*clip);
  const ChatMessage msg{"user", WithDefaultPlaceholders("Compare.", 2, 1), std::nullopt};
  auto rendered = RenderChatPrompt(std::span(&msg, 1), true);
  EXPECT_TRUE(rendered.ok());
  // The encoders only: a context as long as the prompt needs (the tiny decoder holds 512 positions).
  auto p = PreprocessPrompt(model.config(), model.tokenizer(), *rendered, media, {}, 1 << 20);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return *p;
}

// Writes `p`'s media as ORT GenAI's processors batch them; `extra_frames` pads the clips.
void WriteOrtLayout(const PreprocessedPrompt& p, const std::string& dir, int64_t extra_frames = 7) {
  const ProcessedImage& first = p.images[0];
  const int64_t S = first.crop_size, P = first.patches_per_side, n = static_cast<int64_t>(p.images.size());
  int64_t crops = 0;
  for (const ProcessedImage& im : p.images) crops = std::max(crops, im.num_crops);
  std::vector<float> pv(static_cast<size_t>(n * crops * 3 * S * S), 0.0f), mask(static_cast<size_t>(n * crops * P * P), 1.0f);
  std::vector<int64_t> sizes;
  for (int64_t k = 0; k < n; ++k) {
    const ProcessedImage& im = p.images[static_cast<size_t>(k)];
    std::copy(im.pixel_values.begin(), im.pixel_values.end(), pv.begin() + k * crops * 3 * S * S);
    std::copy(im.attention_mask.begin(), im.attention_mask.end(), mask.begin() + k * crops * P * P);
    sizes.push_back(im.hd_height);
    sizes.push_back(im.hd_width);
  }
  ASSERT_TRUE(WriteNpyF32(dir + "/pixel_values.npy", pv.data(), {n, crops, 3, S, S}).ok());
  ASSERT_TRUE(WriteNpyF32(dir + "/image_attention_mask.npy", mask.data(), {n, crops, P, P}).ok());
  ASSERT_TRUE(WriteNpyI64(dir + "/image_sizes.npy", sizes.data(), {n, 2}).ok());
  const AudioFeatures& a = p.audios[0];
  const int64_t frames = a.frames + extra_frames, mel = a.num_mel;
  std::vector<float> embeds(static_cast<size_t>(frames * mel), 0.0f);
  std::copy(a.log_mel.begin(), a.log_mel.end(), embeds.begin());
  std::vector<int64_t> amask(static_cast<size_t>(frames), 0), asizes = {a.num_tokens};
  std::fill(amask.begin(), amask.begin() + a.frames, 1);
  ASSERT_TRUE(WriteNpyF32(dir + "/audio_embeds.npy", embeds.data(), {1, frames, mel}).ok());
  ASSERT_TRUE(WriteNpyI64(dir + "/audio_attention_mask.npy", amask.data(), {1, frames}).ok());
  ASSERT_TRUE(WriteNpyI64(dir + "/audio_sizes.npy", asizes.data(), {1}).ok());
}

TEST(ProcessorTensors, OrtLayoutLoadsBackIntoOurPreprocessingAndFeatures) {
  auto model = Tiny();
  ASSERT_NE(model, nullptr);
  const PreprocessedPrompt ours = Ours(*model);
  ASSERT_EQ(ours.images.size(), 2u);
  ASSERT_NE(ours.images[0].num_crops, ours.images[1].num_crops);  // so the first image is padded
  const std::string dir = test::TempDir("processor_tensors");
  WriteOrtLayout(ours, dir);
  auto loaded = LoadProcessorTensors(model->config(), dir, ours.ids);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->ids, ours.ids);
  EXPECT_EQ(loaded->mode, ours.mode);
  EXPECT_EQ(loaded->mode, LoraMode::kVision);
  EXPECT_TRUE(loaded->audio_with_image);
  EXPECT_EQ(loaded->count.image_tokens, ours.count.image_tokens);
  EXPECT_EQ(loaded->count.audio_tokens, ours.count.audio_tokens);
  EXPECT_EQ(loaded->count.text_tokens, ours.count.text_tokens);
  ASSERT_EQ(loaded->images.size(), 2u);
  for (size_t k = 0; k < 2; ++k) {
    const ProcessedImage &a = loaded->images[k], &b = ours.images[k];
    EXPECT_EQ(a.num_crops, b.num_crops);
    EXPECT_EQ(a.hd_height, b.hd_height);
    EXPECT_EQ(a.hd_width, b.hd_width);
    EXPECT_EQ(a.num_tokens, b.num_tokens);
    EXPECT_TRUE(a.pixel_values == b.pixel_values) << "image " << k;
    EXPECT_TRUE(a.attention_mask == b.attention_mask) << "image " << k;
  }
  ASSERT_EQ(loaded->audios.size(), 1u);
  EXPECT_EQ(loaded->audios[0].frames, ours.audios[0].frames);
  EXPECT_EQ(loaded->audios[0].num_tokens, ours.audios[0].num_tokens);
  EXPECT_TRUE(loaded->audios[0].log_mel == ours.audios[0].log_mel);
  auto from_tensors = EncodeMedia(*model, *loaded);
  auto from_files = EncodeMedia(*model, ours);
  ASSERT_TRUE(from_tensors.ok() && from_files.ok());
  EXPECT_TRUE(from_tensors->features.image == from_files->features.image);
  EXPECT_TRUE(from_tensors->features.audio == from_files->features.audio);
  EXPECT_FALSE(from_tensors->features.image.empty());
}

TEST(ProcessorTensors, AudioAloneRunsTheSpeechAdapterAndNoneIsText) {
  auto model = Tiny();
  ASSERT_NE(model, nullptr);
  PreprocessedPrompt ours = Ours(*model);
  const std::string dir = test::TempDir("processor_tensors_audio");
  WriteOrtLayout(ours, dir);
  for (const char* f : {"pixel_values.npy", "image_attention_mask.npy", "image_sizes.npy"})
    std::filesystem::remove(dir + "/" + f);
  std::vector<int32_t> ids;
  for (int32_t id : ours.ids)
    if (id != kImageTokenId) ids.push_back(id);
  auto audio = LoadProcessorTensors(model->config(), dir, ids);
  ASSERT_TRUE(audio.ok()) << audio.status().ToString();
  EXPECT_EQ(audio->mode, LoraMode::kSpeech);
  EXPECT_FALSE(audio->audio_with_image);
  const std::string empty = test::TempDir("processor_tensors_none");
  auto text = LoadProcessorTensors(model->config(), empty, {1, 2, 3});
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(text->mode, LoraMode::kNone);
  EXPECT_EQ(text->count.text_tokens, 3);
}

TEST(ProcessorTensors, InconsistentInputsAreClearErrors) {
  auto model = Tiny();
  ASSERT_NE(model, nullptr);
  const PreprocessedPrompt ours = Ours(*model);
  const ModelConfig& cfg = model->config();
  auto expect_error = [&](const std::string& dir, std::vector<int32_t> ids, const std::string& words) {
    auto r = LoadProcessorTensors(cfg, dir, std::move(ids));
    ASSERT_FALSE(r.ok()) << words;
    EXPECT_NE(r.status().ToString().find(words), std::string::npos) << r.status().ToString();
  };
  expect_error(test::TempDir("pt_missing") + "/nope", ours.ids, "does not exist");
  {  // one image placeholder too few
    const std::string dir = test::TempDir("pt_count");
    WriteOrtLayout(ours, dir);
    std::vector<int32_t> ids = ours.ids;
    ids.erase(std::find(ids.begin(), ids.end(), kImageTokenId));
    expect_error(dir, ids, "placeholders");
  }
  {  // pixel_values of the wrong crop size
    const std::string dir = test::TempDir("pt_shape");
    WriteOrtLayout(ours, dir);
    std::vector<float> v(2 * 3 * 7 * 7);
    ASSERT_TRUE(WriteNpyF32(dir + "/pixel_values.npy", v.data(), {1, 2, 3, 7, 7}).ok());
    expect_error(dir, ours.ids, "pixel_values");
  }
  {  // an image size that is not a multiple of the crop
    const std::string dir = test::TempDir("pt_sizes");
    WriteOrtLayout(ours, dir);
    std::vector<int64_t> sizes = {ours.images[0].hd_height + 1, ours.images[0].hd_width, ours.images[1].hd_height,
                                  ours.images[1].hd_width};
    ASSERT_TRUE(WriteNpyI64(dir + "/image_sizes.npy", sizes.data(), {2, 2}).ok());
    expect_error(dir, ours.ids, "multiple of the crop size");
  }
  {  // masks without pixels
    const std::string dir = test::TempDir("pt_orphan");
    WriteOrtLayout(ours, dir);
    std::filesystem::remove(dir + "/pixel_values.npy");
    expect_error(dir, ours.ids, "without pixel_values");
  }
  {  // more tokens claimed than the clip's frames make
    const std::string dir = test::TempDir("pt_audio");
    WriteOrtLayout(ours, dir);
    std::vector<int64_t> asizes = {ours.audios[0].num_tokens + 1000};
    ASSERT_TRUE(WriteNpyI64(dir + "/audio_sizes.npy", asizes.data(), {1}).ok());
    std::vector<int32_t> ids = ours.ids;
    ids.insert(std::find(ids.begin(), ids.end(), kAudioTokenId), 1000, kAudioTokenId);
    auto loaded = LoadProcessorTensors(cfg, dir, ids);
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    auto enc = EncodeMedia(*model, *loaded);
    ASSERT_FALSE(enc.ok());
    EXPECT_NE(enc.status().ToString().find("num_tokens"), std::string::npos) << enc.status().ToString();
  }
}

}  // namespace
}  // namespace phi4mm
