// Batch invariance of the batched engine on the tiny fixtures: text, image, audio and image+audio
// requests (prompts past the LongRoPE switch and prompts that cross it while decoding, greedy and
// seeded sampling) run alone, 3 and 8 at a time in mixed LoRA modes, with prefill chunks smaller
// than the prompts, give the same tokens as Session::Generate alone (what `phi4mm run` does) and
// the same logits at every step, bit for bit (tests/batch_invariance_test.cc holds the kernels to
// it). Also the batched step and LoRA segments against their single-sequence forms, bit for bit.
#include <gtest/gtest.h>

#include "phi4mm/runtime/engine.h"
#include "phi4mm/runtime/media.h"
#include "test_util.h"

namespace phi4mm {
namespace {

using test::FixturePath;

struct Case {
  std::string name;
  std::string prompt;
  MediaInputs media;
  int64_t max_new = 8;
  SamplingOptions sampling;
};

// The tiny model's original_max_position_embeddings is 32: "short" prompts start below it and
// cross it while decoding; the others run on the long table from the start.
std::vector<Case> Cases() {
  std::vector<Case> c;
  c.push_back({"text_crossing",
               "<|user|>Tell me a short story about a small robot who learns to paint the sea at night.<|end|>"
               "<|assistant|>",
               {},
               16,
               {}});
  c.push_back({"text_long",
               "<|system|>You are a careful assistant who answers in full sentences.<|end|><|user|>Explain why the "
               "sky is blue, then why sunsets are red, and give one everyday example of each.<|end|><|assistant|>",
               {},
               8,
               {}});
  Case img{"image", "<|user|><|image_1|>What is in this picture?<|end|><|assistant|>", {}, 6, {}};
  img.media.images.push_back(test::FixtureImage("images/tiny_5x7.png"));
  c.push_back(img);
  Case aud{"audio", "<|user|><|audio_1|>Transcribe the audio.<|end|><|assistant|>", {}, 6, {}};
  aud.media.audios.push_back(test::FixtureAudio("audio/tone_1s_16k.wav"));
  c.push_back(aud);
  Case both{"image_audio", "<|user|><|image_1|><|audio_1|>Does the sound match the picture?<|end|><|assistant|>",
            {}, 6, {}};
  both.media.images.push_back(test::FixtureImage("images/tiny_5x7.png"));
  both.media.audios.push_back(test::FixtureAudio("audio/silence_1s_16k.wav"));
  c.push_back(both);
  Case sampled{"text_sampled", "<|user|>Name three colours.<|end|><|assistant|>", {}, 12, {}};
  sampled.sampling.temperature = 0.9f;
  sampled.sampling.top_k = 40;
  sampled.sampling.seed = 7;
  c.push_back(sampled);
  Case aud2{"audio_speech", "<|user|><|audio_1|>What do you hear?<|end|><|assistant|>", {}, 5, {}};
  aud2.media.audios.push_back(test::FixtureAudio("audio/speech_16k_pcm16.wav"));
  c.push_back(aud2);
  c.push_back({"text_short", "<|user|>Hi<|end|><|assistant|>", {}, 20, {}});
  return c;
}

struct Outcome {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;  // before each sampling
  std::string text;
  int64_t prompt_len = 0;
};

// What `phi4mm run` does: the encoders, then Session::Generate; the logits come from its taps.
Outcome Alone(const std::shared_ptr<const Model>& model, const Case& c) {
  Outcome r;
  auto prep = PreparePrompt(*model, c.prompt, c.media);
  EXPECT_TRUE(prep.ok()) << prep.status().ToString();
  if (!prep.ok()) return r;
  r.prompt_len = static_cast<int64_t>(prep->ids.size());
  Session s(model);
  test::MemoryTap tap;
  s.SetTap(&tap);
  GenerateOptions go;
  go.max_new_tokens = c.max_new;
  go.sampling = c.sampling;
  auto g = s.Generate(prep->ids, prep->mode, go, {}, &prep->features);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  if (!g.ok()) return r;
  r.tokens = g->tokens;
  r.text = g->text;
  for (size_t k = 0; k < r.tokens.size(); ++k) {
    const std::string name = k == 0 ? "prefill.logits" : "step." + std::to_string(k) + ".logits";
    auto it = tap.tensors.find(name);
    EXPECT_NE(it, tap.tensors.end()) << c.name << ": no tap " << name;
    if (it != tap.tensors.end()) r.logits.push_back(it->second.data);
  }
  return r;
}

// Runs the cases together in one engine and returns each one's run.
std::vector<Outcome> Together(const std::shared_ptr<const Model>& model, const std::vector<Case>& cases,
                          int64_t prefill_chunk, bool speculate = false, EngineStats* stats = nullptr) {
  EngineOptions eo;
  eo.max_running = 8;
  eo.prefill_chunk = prefill_chunk;
  eo.prefix_cache_bytes = 0;  // every request computes its own prompt here
  auto engine = Engine::Start(model, eo);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  std::vector<Outcome> runs(cases.size());
  std::vector<RequestHandle> handles;
  for (size_t i = 0; i < cases.size(); ++i) {
    EngineRequest req;
    req.prompt = cases[i].prompt;
    req.media = cases[i].media;
    req.generate.max_new_tokens = cases[i].max_new;
    req.generate.sampling = cases[i].sampling;
    if (speculate) req.generate.speculative.mode = SpeculativeMode::kNgram;
    Outcome* run = &runs[i];
    req.on_logits = [run](std::span<const float> l) { run->logits.emplace_back(l.begin(), l.end()); };
    auto h = (*engine)->Submit(std::move(req));
    EXPECT_TRUE(h.ok()) << h.status().ToString();
    handles.push_back(h.ok() ? *h : RequestHandle());
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    auto r = handles[i].Wait();
    EXPECT_TRUE(r.ok()) << cases[i].name << ": " << r.status().ToString();
    if (!r.ok()) continue;
    runs[i].tokens = r->generation.tokens;
    runs[i].text = r->generation.text;
  }
  const EngineStats st = (*engine)->stats();
  EXPECT_EQ(st.kv_reserved_bytes, 0);
  if (stats) *stats = st;
  return runs;
}

void ExpectSame(const Outcome& got, const Outcome& want, const std::string& what) {
  EXPECT_EQ(got.tokens, want.tokens) << what;
  EXPECT_EQ(got.text, want.text) << what;
  ASSERT_EQ(got.logits.size(), want.logits.size()) << what;
  for (size_t k = 0; k < want.logits.size(); ++k)
    EXPECT_TRUE(got.logits[k] == want.logits[k])
        << what << " step " << k << ": max abs difference " << test::MaxAbsDiff(got.logits[k], want.logits[k]);
}

class EngineBatch : public ::testing::TestWithParam<std::string> {};

TEST_P(EngineBatch, EveryRequestEqualsRunningItAlone) {
  auto model = test::TinyModel(GetParam());
  const std::vector<Case> cases = Cases();
  std::vector<Outcome> alone;
  for (const Case& c : cases) {
    alone.push_back(Alone(model, c));
    // Every case generates something to compare (no case stops at once).
    EXPECT_GE(alone.back().tokens.size(), 2u) << c.name;
  }
  // Batches of 1 (each alone in the engine), 3 (text, image, audio) and 8 (all), with prefill
  // chunks of 7 rows so prompts are split over several steps next to other requests' rows.
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::vector<Outcome> one = Together(model, {cases[i]}, 7);
    ExpectSame(one[0], alone[i], GetParam() + " batch of 1: " + cases[i].name);
  }
  const std::vector<Case> three = {cases[0], cases[2], cases[3]};
  const std::vector<Outcome> r3 = Together(model, three, 7);
  ExpectSame(r3[0], alone[0], GetParam() + " batch of 3: " + cases[0].name);
  ExpectSame(r3[1], alone[2], GetParam() + " batch of 3: " + cases[2].name);
  ExpectSame(r3[2], alone[3], GetParam() + " batch of 3: " + cases[3].name);
  const std::vector<Outcome> r8 = Together(model, cases, 7);
  for (size_t i = 0; i < cases.size(); ++i) ExpectSame(r8[i], alone[i], GetParam() + " batch of 8: " + cases[i].name);
  // The first case starts on the short rotary table and crosses the switch while decoding.
  const int64_t switch_at = model->config().text.original_max_position_embeddings;
  EXPECT_LT(alone[0].prompt_len, switch_at);
  EXPECT_GT(alone[0].prompt_len + static_cast<int64_t>(alone[0].tokens.size()), switch_at + 1);
}

// With speculation (prompt lookup) in the engine: the same tokens and, row by row, the same
// logits as each request alone without it, in batches of 1, 3 and 8 beside prefill chunks; and
// drafts were verified and taken.
TEST_P(EngineBatch, SpeculativeRequestsEqualRunningAloneWithout) {
  auto model = test::TinyModel(GetParam());
  std::vector<Case> cases = Cases();
  for (Case& c : cases) c.max_new = 24;
  std::vector<Outcome> alone;
  for (const Case& c : cases) alone.push_back(Alone(model, c));
  EngineStats st;
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::vector<Outcome> one = Together(model, {cases[i]}, 7, true);
    ExpectSame(one[0], alone[i], GetParam() + " speculative batch of 1: " + cases[i].name);
  }
  const std::vector<Case> three = {cases[0], cases[2], cases[3]};
  const std::vector<Outcome> r3 = Together(model, three, 7, true);
  ExpectSame(r3[0], alone[0], GetParam() + " speculative batch of 3: " + cases[0].name);
  ExpectSame(r3[1], alone[2], GetParam() + " speculative batch of 3: " + cases[2].name);
  ExpectSame(r3[2], alone[3], GetParam() + " speculative batch of 3: " + cases[3].name);
  const std::vector<Outcome> r8 = Together(model, cases, 7, true, &st);
  for (size_t i = 0; i < cases.size(); ++i)
    ExpectSame(r8[i], alone[i], GetParam() + " speculative batch of 8: " + cases[i].name);
  EXPECT_GT(st.draft_tokens, 0);
  EXPECT_GT(st.accepted_draft_tokens, 0);
  EXPECT_LT(st.decode_rows - st.draft_tokens, st.decode_rows);
  std::printf("[speculative] %s, 8 requests: %lld of %lld drafted ids accepted\n", GetParam().c_str(),
              static_cast<long long>(st.accepted_draft_tokens), static_cast<long long>(st.draft_tokens));
}

INSTANTIATE_TEST_SUITE_P(Layouts, EngineBatch, ::testing::Values("orig", "native"));

TEST(DecoderStep, MixedChunksEqualOneSequenceAtATime) {
  auto model = test::TinyModel("orig");
  const Decoder& dec = model->decoder();
  const int64_t H = dec.config().hidden_size;
  // Three sequences in three LoRA modes, one with a cached past and one on the long table.
  const std::vector<int64_t> lens = {5, 1, 9};
  const std::vector<LoraMode> modes = {LoraMode::kSpeech, LoraMode::kNone, LoraMode::kVision};
  const std::vector<bool> longs = {false, false, true};
  std::vector<std::vector<float>> emb;
  for (size_t i = 0; i < lens.size(); ++i) emb.push_back(test::Gaussian(lens[i] * H, 11 + i, 0.02f));
  std::vector<KvCache> solo, batched;
  std::vector<std::vector<float>> want(lens.size(), std::vector<float>(H)), got(lens.size(), std::vector<float>(H));
  for (size_t i = 0; i < lens.size(); ++i) {
    solo.push_back(dec.NewCache());
    batched.push_back(dec.NewCache());
  }
  // A past of 3 positions for sequence 1 in both.
  const std::vector<float> past = test::Gaussian(3 * H, 99, 0.02f);
  std::vector<float> tmp(H);
  ASSERT_TRUE(dec.Forward(past.data(), 3, modes[1], longs[1], &solo[1], model->pool(), nullptr, "", tmp.data()).ok());
  ASSERT_TRUE(
      dec.Forward(past.data(), 3, modes[1], longs[1], &batched[1], model->pool(), nullptr, "", tmp.data()).ok());
  std::vector<SeqChunk> chunks;
  for (size_t i = 0; i < lens.size(); ++i) {
    ASSERT_TRUE(dec.Forward(emb[i].data(), lens[i], modes[i], longs[i], &solo[i], model->pool(), nullptr, "",
                            want[i].data())
                    .ok());
    chunks.push_back({emb[i].data(), lens[i], &batched[i], modes[i], longs[i], got[i].data()});
  }
  DecoderScratch scratch;
  ASSERT_TRUE(dec.Step(chunks, model->pool(), &scratch).ok());
  for (size_t i = 0; i < lens.size(); ++i) {
    EXPECT_TRUE(got[i] == want[i]) << "sequence " << i << ": max abs difference " << test::MaxAbsDiff(got[i], want[i]);
    EXPECT_EQ(batched[i].length(), solo[i].length());
  }
}

TEST(DecoderStep, RefusesSharedCachesAndWrongTablesWithoutTouchingAnyCache) {
  auto model = test::TinyModel("orig");
  const Decoder& dec = model->decoder();
  const int64_t H = dec.config().hidden_size;
  const std::vector<float> e = test::Gaussian(2 * H, 3, 0.02f);
  std::vector<float> h(H);
  KvCache a = dec.NewCache(), b = dec.NewCache();
  DecoderScratch scratch;
  std::vector<SeqChunk> shared = {{e.data(), 1, &a, LoraMode::kNone, false, h.data()},
                                  {e.data() + H, 1, &a, LoraMode::kNone, false, h.data()}};
  EXPECT_FALSE(dec.Step(shared, model->pool(), &scratch).ok());
  EXPECT_EQ(a.length(), 0);
  ASSERT_TRUE(dec.Forward(e.data(), 1, LoraMode::kNone, false, &b, model->pool(), nullptr, "", h.data()).ok());
  std::vector<SeqChunk> wrong = {{e.data(), 1, &a, LoraMode::kNone, false, h.data()},
                                 {e.data() + H, 1, &b, LoraMode::kNone, true, h.data()}};
  const Status st = dec.Step(wrong, model->pool(), &scratch);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("rotary table"), std::string::npos) << st.message();
  EXPECT_EQ(a.length(), 0);
  EXPECT_EQ(b.length(), 1);
  // A reservation is a hard limit.
  KvCache r = dec.NewCache();
  r.Reserve(1);
  std::vector<SeqChunk> over = {{e.data(), 2, &r, LoraMode::kNone, false, h.data()}};
  EXPECT_FALSE(dec.Step(over, model->pool(), &scratch).ok());
  EXPECT_EQ(r.length(), 0);
}

}  // namespace
}  // namespace phi4mm
