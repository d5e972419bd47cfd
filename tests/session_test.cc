// Session behaviour on the tiny fixture: the KV cache gives the same logits as a full recompute
// (within and across the LongRoPE switch, and across chat turns), a change of LoRA mode recomputes
// the sequence, generation stops on stop strings / context / max tokens as documented, streaming
// delivers exactly the final text, and bad requests fail without changing the session.
#include <gtest/gtest.h>

#include "phi4mm/runtime/chat.h"
#include "test_util.h"

namespace phi4mm {
namespace {

std::shared_ptr<const Model> Tiny() {
  static std::shared_ptr<const Model> m = [] {
    auto r = Model::Load(test::FixturePath("tiny/orig"));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : nullptr;
  }();
  return m;
}

std::vector<int32_t> Ids(const std::string& text) {
  auto r = Tiny()->tokenizer().Encode(text);
  EXPECT_TRUE(r.ok());
  return r.ok() ? *r : std::vector<int32_t>{};
}

std::vector<int32_t> Range(int32_t from, int32_t n) {
  std::vector<int32_t> v;
  for (int32_t i = 0; i < n; ++i) v.push_back(from + (i * 37) % 3000);
  return v;
}

// Bit for bit: a row's logits do not depend on how many rows its step computed
// (tests/batch_invariance_test.cc holds the kernels to it).
void ExpectSameLogits(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  EXPECT_TRUE(a == b) << what << ": max abs difference " << test::MaxAbsDiff(a, b);
}

TEST(Session, IncrementalEqualsFullRecompute) {
  auto model = Tiny();
  ASSERT_NE(model, nullptr);
  // 150: the cache grows (64 -> 128 -> 256 positions) while it holds rows, so every head's plane
  // moves to its new place.
  for (int32_t total : {20, 31, 32, 33, 60, 150}) {
    const std::vector<int32_t> ids = Range(100, total);
    Session full(model), pieces(model);
    ASSERT_TRUE(full.Append(ids, LoraMode::kVision).ok());
    // Feed in uneven chunks so some chunk crosses original_max_position_embeddings (32).
    for (size_t i = 0; i < ids.size();) {
      const size_t n = std::min<size_t>(ids.size() - i, 1 + i % 7);
      ASSERT_TRUE(pieces.Append(std::span(ids).subspan(i, n), LoraMode::kVision).ok());
      i += n;
    }
    ExpectSameLogits(pieces.logits(), full.logits(), "total " + std::to_string(total));
    EXPECT_EQ(pieces.cached_tokens(), total);
  }
}

TEST(Session, LoraModeChangeRecomputesWholeSequence) {
  auto model = Tiny();
  const std::vector<int32_t> a = Range(5, 12), b = Range(900, 5);
  Session s(model), fresh(model);
  ASSERT_TRUE(s.Append(a, LoraMode::kNone).ok());
  ASSERT_TRUE(s.Append(b, LoraMode::kSpeech).ok());
  EXPECT_EQ(s.mode(), LoraMode::kSpeech);
  std::vector<int32_t> all = a;
  all.insert(all.end(), b.begin(), b.end());
  ASSERT_TRUE(fresh.Append(all, LoraMode::kSpeech).ok());
  ExpectSameLogits(s.logits(), fresh.logits(), "none then speech");
  // And the adapters really change the result.
  Session none(model);
  ASSERT_TRUE(none.Append(all, LoraMode::kNone).ok());
  EXPECT_GT(test::MaxAbsDiff(none.logits(), fresh.logits()), 1e-3);
}

TEST(Session, ChatTurnsReuseTheCacheAndMatchARecompute) {
  auto model = Tiny();
  Chat chat(model, "You are a terse assistant who answers every question in exactly one short sentence, without any preamble, apology or filler words.");
  GenerateOptions opts;
  opts.max_new_tokens = 4;
  auto r1 = chat.Send("Hello there", opts);
  ASSERT_TRUE(r1.ok()) << r1.status().ToString();
  const size_t after_first = chat.session().tokens().size();
  auto r2 = chat.Send("And then?", opts);
  ASSERT_TRUE(r2.ok()) << r2.status().ToString();
  // The second turn only processed its own tokens (plus the closing <|end|>), unless the switch
  // to the long rotary table forced a recompute.
  const auto& toks = chat.session().tokens();
  EXPECT_GT(toks.size(), after_first);
  // The conversation is exactly the template rendering: <|system|>..<|end|><|user|>..<|end|><|assistant|>
  // answer <|end|><|user|>..<|end|><|assistant|> answer.
  EXPECT_EQ(toks[0], 200022);
  size_t ends = 0;
  for (int32_t t : toks) ends += t == 200020;
  EXPECT_GE(ends, 4u);
  // The second turn did not recompute the first (both turns are past the rotary switch at 32).
  ASSERT_GT(after_first, 33u);
  EXPECT_LT(r2->prompt_tokens, static_cast<int64_t>(after_first) / 2);
  // Recompute the same sequence from scratch: identical logits for the last sampled token (the
  // sampled token itself is never fed).
  Session fresh(model);
  const std::vector<int32_t> seq(toks.begin(), toks.end() - 1);
  ASSERT_TRUE(fresh.Append(seq, LoraMode::kNone).ok());
  ExpectSameLogits(chat.session().logits(), fresh.logits(), "chat vs recompute");
  EXPECT_EQ(ArgMax(fresh.logits()), toks.back());
}

TEST(Session, StreamingDeliversExactlyTheAnswer) {
  auto model = Tiny();
  Session s(model);
  GenerateOptions opts;
  opts.max_new_tokens = 12;
  std::string streamed;
  auto r = s.Generate(Ids("<|user|>Tell me a story<|end|><|assistant|>"), LoraMode::kNone, opts,
                      [&](std::string_view t) {
                        streamed += t;
                        return true;
                      });
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(streamed, r->text);
  EXPECT_EQ(r->tokens.size(), 12u);
  EXPECT_EQ(r->finish, FinishReason::kMaxTokens);
  EXPECT_EQ(r->text, model->tokenizer().Decode(r->tokens, /*skip_special=*/true));
}

TEST(Session, StopStringCutsTheAnswer) {
  auto model = Tiny();
  const std::vector<int32_t> prompt = Ids("<|user|>Tell me a story<|end|><|assistant|>");
  GenerateOptions opts;
  opts.max_new_tokens = 12;
  Session s1(model);
  auto full = s1.Generate(prompt, LoraMode::kNone, opts);
  ASSERT_TRUE(full.ok());
  ASSERT_GE(full->text.size(), 6u);
  // Stop at a piece from the middle of the answer.
  const size_t cut = full->text.size() / 2;
  const std::string stop = full->text.substr(cut, 3);
  const size_t first = full->text.find(stop);
  opts.stop_strings = {stop};
  Session s2(model);
  std::string streamed;
  auto r = s2.Generate(prompt, LoraMode::kNone, opts, [&](std::string_view t) {
    streamed += t;
    return true;
  });
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->finish, FinishReason::kStopString);
  EXPECT_EQ(r->text, full->text.substr(0, first));
  EXPECT_EQ(streamed, r->text);
}

TEST(Session, CallbackCanCancel) {
  auto model = Tiny();
  Session s(model);
  GenerateOptions opts;
  opts.max_new_tokens = 20;
  int calls = 0;
  auto r = s.Generate(Ids("<|user|>Go<|end|><|assistant|>"), LoraMode::kNone, opts, [&](std::string_view) {
    return ++calls < 2;
  });
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->finish, FinishReason::kCancelled);
  EXPECT_LT(r->tokens.size(), 20u);
}

TEST(Session, StopsWhenTheContextIsFull) {
  auto model = Tiny();
  const int64_t ctx = model->context_length();
  Session s(model);
  GenerateOptions opts;
  opts.max_new_tokens = 50;
  opts.stop_ids = {-1};
  auto r = s.Generate(Range(10, static_cast<int32_t>(ctx - 5)), LoraMode::kNone, opts);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->finish, FinishReason::kContextFull);
  EXPECT_EQ(static_cast<int64_t>(s.tokens().size()), ctx);
  EXPECT_EQ(r->tokens.size(), 5u);
}

TEST(Session, PromptLongerThanContextIsRejectedAndLeavesTheSessionAlone) {
  auto model = Tiny();
  Session s(model);
  ASSERT_TRUE(s.Append(Range(1, 10), LoraMode::kNone).ok());
  const std::vector<float> logits = s.logits();
  Status st = s.Append(Range(1, static_cast<int32_t>(model->context_length())), LoraMode::kNone);
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange);
  EXPECT_NE(st.message().find("context holds 512"), std::string::npos) << st.message();
  EXPECT_EQ(s.tokens().size(), 10u);
  EXPECT_EQ(s.logits(), logits);
}

TEST(Session, RejectsIdsOutsideTheVocabulary) {
  Session s(Tiny());
  const std::vector<int32_t> bad = {5, 300000};
  Status st = s.Append(bad, LoraMode::kNone);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("300000"), std::string::npos);
  EXPECT_TRUE(s.tokens().empty());
}

TEST(Session, SampledGenerationIsReproducibleFromTheSeed) {
  auto model = Tiny();
  const std::vector<int32_t> prompt = Ids("<|user|>Hi<|end|><|assistant|>");
  GenerateOptions opts;
  opts.max_new_tokens = 8;
  opts.stop_ids = {-1};
  opts.sampling.temperature = 1.5f;
  opts.sampling.top_p = 0.95f;
  opts.sampling.seed = 7;
  Session a(model), b(model), c(model);
  auto ra = a.Generate(prompt, LoraMode::kNone, opts);
  auto rb = b.Generate(prompt, LoraMode::kNone, opts);
  opts.sampling.seed = 8;
  auto rc = c.Generate(prompt, LoraMode::kNone, opts);
  ASSERT_TRUE(ra.ok() && rb.ok() && rc.ok());
  EXPECT_EQ(ra->tokens, rb->tokens);
  EXPECT_NE(ra->tokens, rc->tokens);
  for (int32_t id : ra->tokens) EXPECT_LT(id, model->tokenizer().vocab_size()) << "sampled an id with no string";
}

TEST(Session, InvalidSamplingOptionsAreRejected) {
  Session s(Tiny());
  GenerateOptions opts;
  opts.sampling.top_p = 0.0f;
  auto r = s.Generate(Ids("hi"), LoraMode::kNone, opts);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("top-p"), std::string::npos);
}

}  // namespace
}  // namespace phi4mm

namespace phi4mm {
namespace {

TEST(SessionMedia, FeaturesAreSplicedAtPlaceholdersAndKeptForRecomputes) {
  auto model = Tiny();
  const int64_t H = model->config().text.hidden_size;
  const std::vector<int32_t> ids = {200021, 200010, 200010, 200011, 13, 200010, 200020, 200019};
  MediaFeatures media;
  for (int i = 0; i < 3 * H; ++i) media.image.push_back(0.01f * static_cast<float>(i % 17) - 0.05f);
  for (int i = 0; i < H; ++i) media.audio.push_back(0.3f - 0.02f * static_cast<float>(i % 5));
  Session s(model);
  test::MemoryTap tap;
  s.SetTap(&tap);
  ASSERT_TRUE(s.Append(ids, LoraMode::kVision, &media).ok());
  auto check_embeds = [&](const std::vector<float>& e) {
    const int rows[] = {1, 2, 5};
    for (int k = 0; k < 3; ++k)
      for (int64_t j = 0; j < H; ++j) ASSERT_EQ(e[rows[k] * H + j], media.image[k * H + j]);
    for (int64_t j = 0; j < H; ++j) ASSERT_EQ(e[3 * H + j], media.audio[j]);
  };
  check_embeds(tap.tensors["prefill.embeds"].data);
  const std::vector<float> vision_logits = s.logits();
  // A later request in another mode recomputes the whole sequence, media rows included.
  tap.tensors.clear();
  const std::vector<int32_t> more = {1000, 1001};
  ASSERT_TRUE(s.Append(more, LoraMode::kSpeech).ok());
  ASSERT_EQ(tap.tensors["prefill.embeds"].shape[0], 10);
  check_embeds(tap.tensors["prefill.embeds"].data);
  // The embedding model alone gives the same rows.
  std::vector<float> direct(ids.size() * H);
  ASSERT_TRUE(model->embedding().EmbedWithMedia(ids, media.image, media.audio, direct.data()).ok());
  check_embeds(direct);
}

TEST(SessionMedia, PlaceholderAndFeatureCountsMustMatch) {
  auto model = Tiny();
  const int64_t H = model->config().text.hidden_size;
  const std::vector<int32_t> ids = {200021, 200010, 200010, 13};
  MediaFeatures one;
  one.image.assign(H, 0.1f);
  Session s(model);
  Status st = s.Append(ids, LoraMode::kVision, &one);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("2 image"), std::string::npos) << st.message();
  EXPECT_TRUE(s.tokens().empty());
  st = s.Append(ids, LoraMode::kVision, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  std::vector<float> out(ids.size() * H);
  st = model->embedding().EmbedWithMedia(ids, one.image, {}, out.data());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace phi4mm
