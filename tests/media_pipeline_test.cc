// The whole media path on real files: the input ids recorded with the real model for text, image,
// audio and mixed prompts (tests/fixtures/tokenizer/real_goldens.json, from shared/data/real-goldens)
// reproduced from the real photo and speech clip through our decoders, processors, placeholder
// expansion and chat format; and a conversation on the tiny model where an image joins earlier
// audio, which must re-encode that audio with the vision-speech projection and switch to the vision
// LoRA for the whole sequence, as the reference computes a conversation.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "phi4mm/runtime/chat.h"
#include "phi4mm/runtime/media.h"
#include "test_util.h"

namespace phi4mm {
namespace {

using test::FixturePath;

std::shared_ptr<const Model> Tiny() { return test::TinyModel("orig"); }

Image Photo() {
  auto img = DecodeImageFile(FixturePath("images/pipeline-cat-chonk.jpeg"));
  EXPECT_TRUE(img.ok()) << img.status().ToString();
  return img.ok() ? *img : Image{};
}

AudioClip Speech() {
  auto clip = DecodeAudioFile(FixturePath("audio/real_652-129742-0006.flac"));
  EXPECT_TRUE(clip.ok()) << clip.status().ToString();
  return clip.ok() ? *clip : AudioClip{};
}

TEST(MediaPipeline, RealModelInputIdsFromTheRealPhotoAndClip) {
  auto model = Tiny();
  ASSERT_NE(model, nullptr);
  std::ifstream in(FixturePath("tokenizer/real_goldens.json"));
  const nlohmann::json goldens = nlohmann::json::parse(in);
  const Image photo = Photo();
  const AudioClip clip = Speech();
  int checked = 0;
  for (const auto& c : goldens["cases"]) {
    MediaInputs media;
    for (size_t k = 0; k < c["image_token_counts"].size(); ++k) media.images.push_back(photo);
    for (size_t k = 0; k < c["audio_token_counts"].size(); ++k) media.audios.push_back(clip);
    const ChatMessage msg{"user", c["user_content"].get<std::string>(), std::nullopt};
    auto rendered = RenderChatPrompt(std::span(&msg, 1), true);
    ASSERT_TRUE(rendered.ok());
    std::vector<int32_t> ids;
    auto count = CountPrompt(model->config(), model->tokenizer(), *rendered, media, {}, &ids);
    ASSERT_TRUE(count.ok()) << c["case"] << ": " << count.status().ToString();
    EXPECT_EQ(ids, c["input_ids"].get<std::vector<int32_t>>()) << c["case"];
    EXPECT_EQ(count->image_tokens, c["image_token_counts"].get<std::vector<int64_t>>()) << c["case"];
    EXPECT_EQ(count->audio_tokens, c["audio_token_counts"].get<std::vector<int64_t>>()) << c["case"];
    // The CLI's default placeholders give the same ids when the prompt has none.
    const std::string plain = c["user_content"].get<std::string>().substr(
        c["user_content"].get<std::string>().rfind("|>\n") == std::string::npos
            ? 0
            : c["user_content"].get<std::string>().rfind("|>\n") + 3);
    const ChatMessage msg2{"user", WithDefaultPlaceholders(plain, media.images.size(), media.audios.size()),
                           std::nullopt};
    auto rendered2 = RenderChatPrompt(std::span(&msg2, 1), true);
    ASSERT_TRUE(rendered2.ok());
    std::vector<int32_t> ids2;
    ASSERT_TRUE(CountPrompt(model->config(), model->tokenizer(), *rendered2, media, {}, &ids2).ok());
    EXPECT_EQ(ids2, ids) << c["case"];
    ++checked;
  }
  EXPECT_EQ(checked, 8);
}

TEST(MediaPipeline, DynamicHdChangesTheImageCost) {
  auto model = Tiny();
  MediaInputs media;
  media.images.push_back(Photo());
  const std::string rendered = "<|user|><|image_1|>\nHi<|end|><|assistant|>";
  PromptOptions one;
  one.dynamic_hd = 1;
  auto small = CountPrompt(model->config(), model->tokenizer(), rendered, media, one);
  auto big = CountPrompt(model->config(), model->tokenizer(), rendered, media, {});
  ASSERT_TRUE(small.ok() && big.ok());
  EXPECT_EQ(big->image_tokens[0], 1745);
  EXPECT_LT(small->image_tokens[0], big->image_tokens[0]);
  PromptOptions bad;
  bad.dynamic_hd = -2;
  EXPECT_EQ(CountPrompt(model->config(), model->tokenizer(), rendered, media, bad).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(MediaPipeline, PlaceholderMismatchIsAnError) {
  auto model = Tiny();
  MediaInputs media;
  media.images.push_back(Photo());
  auto r = CountPrompt(model->config(), model->tokenizer(), "<|user|><|image_1|><|image_2|>Hi<|end|><|assistant|>",
                       media);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("2"), std::string::npos) << r.status().message();
}

TEST(MediaPipeline, TooBigForTheContextFailsBeforeEncoding) {
  auto model = Tiny();  // 512-token context; the photo alone takes 1745
  MediaInputs media;
  media.images.push_back(Photo());
  auto r = PreparePrompt(*model, "<|user|><|image_1|>Hi<|end|><|assistant|>", media);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(r.status().message().find("image 1: 1745"), std::string::npos) << r.status().message();
}

TEST(MediaPipeline, ImageJoiningEarlierAudioReencodesItWithTheVisionProjection) {
  auto model = Tiny();
  auto clip = DecodeAudioFile(FixturePath("audio/tone_1s_16k.wav"));
  ASSERT_TRUE(clip.ok()) << clip.status().ToString();
  auto img = DecodeImageFile(FixturePath("images/tiny_5x7.png"));
  ASSERT_TRUE(img.ok()) << img.status().ToString();

  Chat chat(model);
  GenerateOptions opts;
  opts.max_new_tokens = 2;
  MediaInputs turn1;
  turn1.audios.push_back(*clip);
  auto r1 = chat.Send("Listen.", turn1, opts);
  ASSERT_TRUE(r1.ok()) << r1.status().ToString();
  EXPECT_EQ(chat.session().mode(), LoraMode::kSpeech);

  // What the audio rows must become once the conversation has an image.
  auto feats = ComputeAudioFeatures(*clip);
  ASSERT_TRUE(feats.ok());
  auto speech = model->speech();
  ASSERT_TRUE(speech.ok());
  auto with_image = (*speech)->Encode(*feats, /*with_image=*/true, model->pool(), nullptr, "");
  auto without = (*speech)->Encode(*feats, /*with_image=*/false, model->pool(), nullptr, "");
  ASSERT_TRUE(with_image.ok() && without.ok());
  ASSERT_GT(test::MaxAbsDiff(*with_image, *without), 1e-3);

  MediaInputs turn2;
  turn2.images.push_back(*img);
  auto r2 = chat.Send("And look.", turn2, opts);
  ASSERT_TRUE(r2.ok()) << r2.status().ToString();
  EXPECT_EQ(chat.session().mode(), LoraMode::kVision);
  const auto& toks = chat.session().tokens();

  // The conversation equals computing it from scratch in one piece: same ids, image rows from the
  // vision part, audio rows with the vision projection, vision LoRA everywhere.
  auto processed = ProcessImage(*img, ImageProcessorOptions{});
  ASSERT_TRUE(processed.ok());
  auto vision = model->vision();
  ASSERT_TRUE(vision.ok());
  auto image_rows = (*vision)->Encode(*processed, model->pool(), nullptr, "");
  ASSERT_TRUE(image_rows.ok());
  MediaFeatures all;
  all.image = *image_rows;
  all.audio = *with_image;  // with the speech projection (`without`) the logits differ
  Session fresh(model);
  const std::vector<int32_t> fed(toks.begin(), toks.end() - 1);  // the last sampled token is not fed
  ASSERT_TRUE(fresh.Append(fed, LoraMode::kVision, &all).ok());
  const double scale = test::MaxAbs(fresh.logits());
  EXPECT_LE(test::MaxAbsDiff(chat.session().logits(), fresh.logits()), 1e-5 * scale);
}

}  // namespace
}  // namespace phi4mm
