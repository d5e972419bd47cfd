// Tests of the chat prompt format and media placeholder handling: the rendered prompts and ids equal
// what transformers' apply_chat_template gives (chat_cases.json) and what the real Phi-4-mm processor
// produced for text, image and audio prompts (real_goldens.json).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "phi4mm/tokenizer/chat_format.h"
#include "phi4mm/tokenizer/tokenizer.h"
#include "test_util.h"

namespace phi4mm {
namespace {

using json = nlohmann::json;

const std::string kDir = std::string(PHI4MM_FIXTURES_DIR) + "/tokenizer";


json ReadJson(const std::string& name) {
  std::ifstream in(kDir + "/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str());
}

std::vector<ChatMessage> Messages(const json& j) {
  std::vector<ChatMessage> out;
  for (const json& m : j) out.push_back({m["role"].get<std::string>(), m["content"].get<std::string>(), {}});
  return out;
}

std::string Render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  auto r = RenderChatPrompt(messages, add_generation_prompt);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : "";
}

TEST(ChatFormatTest, MatchesTransformersApplyChatTemplate) {
  const json cases = ReadJson("chat_cases.json");
  ASSERT_GE(cases.size(), 10u);
  for (const json& c : cases) {
    const auto messages = Messages(c["messages"]);
    const std::string text = Render(messages, true);
    EXPECT_EQ(text, c["text"].get<std::string>());
    EXPECT_EQ(Render(messages, false), c["text_no_generation_prompt"].get<std::string>());
    auto ids = test::FixtureTokenizer().Encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status().ToString();
    EXPECT_EQ(*ids, c["ids"].get<std::vector<int32_t>>()) << text;
  }
}

TEST(ChatFormatTest, RealModelGoldens) {
  const json goldens = ReadJson("real_goldens.json");
  ASSERT_EQ(goldens["cases"].size(), 8u);  // every case of shared/data/real-goldens
  for (const json& c : goldens["cases"]) {
    SCOPED_TRACE(c["case"].get<std::string>());
    const std::vector<ChatMessage> messages = {{"user", c["user_content"].get<std::string>(), {}}};
    const MediaPlaceholders ph = RewriteMediaPlaceholders(Render(messages, true));
    const auto image_counts = c["image_token_counts"].get<std::vector<int32_t>>();
    const auto audio_counts = c["audio_token_counts"].get<std::vector<int32_t>>();
    EXPECT_EQ(ph.image_numbers.size(), image_counts.size());
    EXPECT_EQ(ph.audio_numbers.size(), audio_counts.size());
    auto ids = test::FixtureTokenizer().Encode(ph.text);
    ASSERT_TRUE(ids.ok()) << ids.status().ToString();
    auto expanded = ExpandMediaTokens(*ids, image_counts, audio_counts);
    ASSERT_TRUE(expanded.ok()) << expanded.status().ToString();
    EXPECT_EQ(*expanded, c["input_ids"].get<std::vector<int32_t>>());
  }
}

TEST(ChatFormatTest, TextOnlyGoldenIsExact) {
  const std::vector<ChatMessage> messages = {{"user", "What is the capital of France?", {}}};
  const std::string text = Render(messages, true);
  EXPECT_EQ(text, "<|user|>What is the capital of France?<|end|><|assistant|>");
  auto ids = test::FixtureTokenizer().Encode(text);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{200021, 4827, 382, 290, 9029, 328, 10128, 30, 200020, 200019}));
}

TEST(ChatFormatTest, SystemToolsAndEos) {
  const std::vector<ChatMessage> messages = {{"system", "S", std::string("[{\"name\": \"f\"}]")},
                                             {"user", "U", {}},
                                             {"assistant", "A", {}},
                                             {"tool", "T", {}}};
  EXPECT_EQ(Render(messages, false),
            "<|system|>S<|tool|>[{\"name\": \"f\"}]<|/tool|><|end|><|user|>U<|end|><|assistant|>A<|end|>"
            "<|tool|>T<|end|><|endoftext|>");
  EXPECT_EQ(Render({}, true), "<|assistant|>");
}

TEST(ChatFormatTest, UnknownRoleIsInvalidArgument) {
  const std::vector<ChatMessage> messages = {{"user", "hi", {}}, {"robot", "beep", {}}};
  auto r = RenderChatPrompt(messages, true);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("\"robot\""), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("message 1"), std::string::npos) << r.status().message();
}

TEST(ChatFormatTest, RewriteMediaPlaceholders) {
  const MediaPlaceholders r = RewriteMediaPlaceholders("<|image_1|>\n<|image_12|>\n<|audio_3|>\nWhat?");
  EXPECT_EQ(r.text, "<|endoftext10|>\n<|endoftext10|>\n<|endoftext11|>\nWhat?");
  EXPECT_EQ(r.image_numbers, (std::vector<int64_t>{1, 12}));
  EXPECT_EQ(r.audio_numbers, (std::vector<int64_t>{3}));
  for (const char* unchanged : {"plain text", "<|image_|>", "<|image_x|>", "<|image_1|", "<|image 1|>",
                                "<|Image_1|>", "<|audio_-1|>", "<|image_1 |>", "<|endoftext10|>", ""}) {
    const MediaPlaceholders u = RewriteMediaPlaceholders(unchanged);
    EXPECT_EQ(u.text, unchanged);
    EXPECT_TRUE(u.image_numbers.empty() && u.audio_numbers.empty()) << unchanged;
  }
  const MediaPlaceholders nested = RewriteMediaPlaceholders("<|<|image_2|>|>");
  EXPECT_EQ(nested.text, "<|<|endoftext10|>|>");
  EXPECT_EQ(nested.image_numbers, (std::vector<int64_t>{2}));
}

TEST(ChatFormatTest, ExpandMediaTokens) {
  const std::vector<int32_t> ids = {200021, kImageTokenId, 198, kAudioTokenId, 198, kImageTokenId, 13, 200020};
  const std::vector<int32_t> images = {2, 3};
  const std::vector<int32_t> audios = {1};
  auto r = ExpandMediaTokens(ids, images, audios);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, (std::vector<int32_t>{200021, kImageTokenId, kImageTokenId, 198, kAudioTokenId, 198, kImageTokenId,
                                      kImageTokenId, kImageTokenId, 13, 200020}));
  const std::vector<int32_t> text = {24912, 2375};
  auto t = ExpandMediaTokens(text, {}, {});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t, text);
}

TEST(ChatFormatTest, ExpandMediaTokensCountMismatch) {
  const std::vector<int32_t> ids = {kImageTokenId, 198, kImageTokenId};
  const std::vector<int32_t> one = {5};
  auto r = ExpandMediaTokens(ids, one, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("prompt has 2 <|image_N|> placeholders but 1 image was given"),
            std::string::npos)
      << r.status().message();
  auto a = ExpandMediaTokens(std::vector<int32_t>{24912}, {}, one);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("prompt has 0 <|audio_N|> placeholders but 1 audio was given"),
            std::string::npos)
      << a.status().message();
  const std::vector<int32_t> negative = {-1, 2};
  auto n = ExpandMediaTokens(ids, negative, {});
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace phi4mm
