// Draft-free speculative decoding: the prompt-lookup proposer, the draft-length tuner, and the
// promise that makes it safe to turn on: with speculation, Session::Generate gives the answer it
// gives without, token for token and byte for byte, greedy and seeded, for text, image, audio and
// image + audio prompts on the tiny fixture (both layouts; prompts that cross the LongRoPE switch
// while decoding), for 200 random prompts on the tiny fixture and 40 on the trained one, and for
// copy-heavy prompts on the trained fixture, where drafts are accepted; and a chat's next turn
// after a speculative answer equals the one after a plain answer. The engine's n-gram pool: what it
// learns and keeps within its memory, and requests drafting from it. (The engine's side:
// tests/engine_batch_test.cc; the server's: tests/python/test_speculative.py.)
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>

#include "phi4mm/runtime/chat.h"
#include "phi4mm/runtime/engine.h"
#include "phi4mm/runtime/media.h"
#include "phi4mm/runtime/speculative.h"
#include "phi4mm/tokenizer/chat_format.h"
#include "test_util.h"

namespace phi4mm {
namespace {

TEST(SpeculativeLookup, TakesWhatFollowedTheLatestLongestMatch) {
  const std::vector<int32_t> t = {1, 2, 3, 4, 9, 1, 2, 3, 5, 6, 7, 8, 1, 2, 3};
  EXPECT_EQ(LookupDraft(t, 4, 1, 3), (std::vector<int32_t>{5, 6, 7, 8}));
  EXPECT_EQ(LookupDraft(t, 2, 1, 3), (std::vector<int32_t>{5, 6}));
  // The draft stops at the end of the sequence.
  const std::vector<int32_t> loop = {4, 5, 4, 5, 4};
  EXPECT_EQ(LookupDraft(loop, 8, 1, 3), (std::vector<int32_t>{5, 4}));
  // A shorter n-gram when the longer has no earlier occurrence; none below min_ngram.
  const std::vector<int32_t> one = {7, 1, 8, 2, 3, 1};
  EXPECT_EQ(LookupDraft(one, 3, 1, 3), (std::vector<int32_t>{8, 2, 3}));
  EXPECT_TRUE(LookupDraft(one, 3, 2, 3).empty());
  EXPECT_TRUE(LookupDraft(std::vector<int32_t>{1, 2, 3}, 4, 1, 3).empty());
  EXPECT_TRUE(LookupDraft(std::vector<int32_t>{}, 4, 1, 3).empty());
}

TEST(SpeculativeLookup, PredictionFirstThenTheContext) {
  SpeculativeOptions o;
  o.prediction = {10, 11, 12, 13, 14, 15};
  const std::vector<int32_t> prompt = {1, 2, 3, 1, 2};
  // An empty answer drafts the prediction's start; then what follows the answer's tail in it.
  EXPECT_EQ(Draft(o, prompt, prompt.size(), 3), (std::vector<int32_t>{10, 11, 12}));
  std::vector<int32_t> t = prompt;
  t.insert(t.end(), {10, 11, 12});
  EXPECT_EQ(Draft(o, t, prompt.size(), 2), (std::vector<int32_t>{13, 14}));
  // The answer left the prediction: nothing from it; mode none drafts nothing else, ngram looks
  // in the sequence.
  t.push_back(99);
  EXPECT_TRUE(Draft(o, t, prompt.size(), 4).empty());
  o.mode = SpeculativeMode::kNgram;
  const std::vector<int32_t> again = {1, 2, 3, 1, 2};
  EXPECT_EQ(Draft(o, again, again.size(), 4), (std::vector<int32_t>{10, 11, 12, 13}));
  o.prediction.clear();
  EXPECT_EQ(Draft(o, again, again.size(), 4), (std::vector<int32_t>{3, 1, 2}));
  EXPECT_TRUE(Draft(o, again, again.size(), 0).empty());
  EXPECT_FALSE(SpeculativeOptions{}.on());
}

TEST(SpeculativeTuner, DraftsWhenItPaysAndProbesWhenItDoesNot) {
  // Cheap verify steps (8 more rows cost 0.3 one-row steps) and drafts mostly accepted: long drafts.
  StepCosts cheap_steps;
  for (int n = 1; n <= 9; ++n) cheap_steps.Record(n, 1.0 + 0.3 * (n - 1) / 8.0);
  DraftTuner cheap(8);
  for (int i = 0; i < 20; ++i) cheap.RecordDraft(8, 7);
  EXPECT_GT(cheap.acceptance(), 0.8);
  EXPECT_GE(cheap.DraftLength(8, cheap_steps), 6);
  EXPECT_LE(cheap.DraftLength(3, cheap_steps), 3);
  // The same steps, drafts always rejected: off, with a probe of at most 2 every 16th step.
  DraftTuner rejected(8);
  for (int i = 0; i < 20; ++i) rejected.RecordDraft(4, 0);
  EXPECT_LT(rejected.acceptance(), 0.1);
  int drafted = 0;
  for (int i = 0; i < 32; ++i) {
    const int k = rejected.DraftLength(8, cheap_steps);
    EXPECT_LE(k, 2);
    drafted += k > 0;
  }
  EXPECT_EQ(drafted, 2);
  // Steps that cost as many one-row steps as they have rows never pay, whatever the acceptance.
  StepCosts steep_steps;
  for (int n = 1; n <= 12; ++n) steep_steps.Record(n, 1.0 * n);
  DraftTuner steep(8);
  for (int i = 0; i < 20; ++i) steep.RecordDraft(8, 6);
  EXPECT_EQ(steep.DraftLength(8, steep_steps), 0);
  // Relative to a step of 4 rows: 4 -> 12 rows costs 3x, no gain either.
  EXPECT_EQ(steep.DraftLength(8, steep_steps, 4), 0);
  // A step already full of rows gets no drafts.
  EXPECT_EQ(cheap.DraftLength(8, cheap_steps, StepCosts::kMaxRows), 0);
  EXPECT_EQ(DraftTuner(0).DraftLength(8, cheap_steps), 0);
  EXPECT_EQ(cheap.DraftLength(0, cheap_steps), 0);
}

TEST(SpeculativeTuner, AFreshTunerDraftsUntilItsFirstDraftIsVerified) {
  // Steps whose rows cost 25 % each: at the prior acceptance (one in three) no draft pays, but
  // nothing is known about this answer's drafts yet, so each step drafts 2 until one is verified.
  StepCosts steps;
  for (int n = 1; n <= 9; ++n) steps.Record(n, 1.0 + 0.25 * (n - 1));
  DraftTuner fresh(8);
  EXPECT_EQ(fresh.DraftLength(8, steps), 2);
  EXPECT_EQ(fresh.DraftLength(8, steps), 2);  // the source had nothing to draft: still unmeasured
  fresh.RecordDraft(2, 2);                    // taken: the rate rises and drafts pay
  EXPECT_GE(fresh.DraftLength(8, steps), 2);
  DraftTuner refused(8);
  EXPECT_EQ(refused.DraftLength(8, steps), 2);
  refused.RecordDraft(2, 0);  // refused: off until the next probe
  for (int i = 0; i < 15; ++i) EXPECT_EQ(refused.DraftLength(8, steps), 0) << i;
  EXPECT_EQ(refused.DraftLength(8, steps), 2);
}

TEST(SpeculativeTuner, OneSlowStepDoesNotMakeARowCountLookDear) {
  StepCosts c;
  EXPECT_EQ(c.Seconds(3), 0);  // not measured
  c.Record(3, 0.010);          // a first step that grew its buffers, or was preempted
  EXPECT_DOUBLE_EQ(c.Seconds(3), 0.010);
  c.Record(3, 0.002);
  c.Record(3, 0.0021);
  EXPECT_DOUBLE_EQ(c.Seconds(3), 0.002);
  // A step of more rows bounds it: 2 rows measured slow once, 3 rows fast.
  c.Record(2, 0.009);
  EXPECT_DOUBLE_EQ(c.Seconds(2), 0.002);
  EXPECT_EQ(c.Seconds(4), 0);  // a larger count is not bounded by smaller ones: still unmeasured
  // The window forgets: after kWindow slower steps (a longer context), the old fast one is gone.
  for (int i = 0; i < StepCosts::kWindow; ++i) c.Record(3, 0.003);
  EXPECT_DOUBLE_EQ(c.Seconds(3), 0.003);
  c.Record(0, 1.0);
  c.Record(StepCosts::kMaxRows + 1, 1.0);
  c.Record(5, -1.0);
  EXPECT_EQ(c.Seconds(0), 0);
  EXPECT_EQ(c.Seconds(5), 0);
}

struct Case {
  std::string name, prompt;
  MediaInputs media;
  int64_t max_new = 24;
  SamplingOptions sampling;
};

GenerateResult GenerateWith(const std::shared_ptr<const Model>& model, const std::vector<int32_t>& ids, LoraMode mode,
                   const MediaFeatures* features, GenerateOptions go, bool speculate) {
  if (speculate) go.speculative.mode = SpeculativeMode::kNgram;
  Session s(model);
  auto g = s.Generate(ids, mode, go, {}, features);
  EXPECT_TRUE(g.ok()) << (speculate ? "speculative: " : "plain: ") << g.status().ToString();
  return g.ok() ? *g : GenerateResult{};
}

// Same ids, text, finish and log-probabilities; returns the speculative run's accepted drafts.
int64_t ExpectSameAnswer(const std::shared_ptr<const Model>& model, const std::vector<int32_t>& ids, LoraMode mode,
                         const MediaFeatures* features, const GenerateOptions& go, const std::string& what) {
  const GenerateResult plain = GenerateWith(model, ids, mode, features, go, false);
  const GenerateResult spec = GenerateWith(model, ids, mode, features, go, true);
  EXPECT_EQ(spec.tokens, plain.tokens) << what;
  EXPECT_EQ(spec.text, plain.text) << what;
  EXPECT_EQ(spec.finish, plain.finish) << what;
  EXPECT_EQ(plain.draft_tokens, 0) << what;
  EXPECT_LE(spec.accepted_draft_tokens, spec.draft_tokens) << what;
  EXPECT_EQ(spec.logprobs.size(), plain.logprobs.size()) << what;
  for (size_t i = 0; i < std::min(spec.logprobs.size(), plain.logprobs.size()); ++i) {
    EXPECT_EQ(spec.logprobs[i].logprob, plain.logprobs[i].logprob) << what << " token " << i;
    EXPECT_EQ(spec.logprobs[i].top.size(), plain.logprobs[i].top.size()) << what << " token " << i;
  }
  // Fewer decoder steps than tokens once drafts were taken.
  if (spec.accepted_draft_tokens > 0) {
    EXPECT_LT(spec.decode_steps, plain.decode_steps) << what;
  }
  return spec.accepted_draft_tokens;
}

class SpeculativeSession : public ::testing::TestWithParam<std::string> {};

TEST_P(SpeculativeSession, EveryCaseGivesTheAnswerWithoutSpeculation) {
  auto model = test::TinyModel(GetParam());
  std::vector<Case> cases;
  // original_max_position_embeddings is 32: the first starts below it and crosses it.
  cases.push_back({"text_crossing", "<|user|>Tell me a short story about a robot.<|end|><|assistant|>", {}, 40, {}});
  cases.push_back({"text_long",
                   "<|user|>Explain why the sky is blue, then why sunsets are red, and give one everyday example of "
                   "each.<|end|><|assistant|>",
                   {}, 40, {}});
  Case img{"image", "<|user|><|image_1|>What is in this picture?<|end|><|assistant|>", {}, 24, {}};
  img.media.images.push_back(test::FixtureImage("images/tiny_5x7.png"));
  cases.push_back(img);
  Case aud{"audio", "<|user|><|audio_1|>Transcribe the audio.<|end|><|assistant|>", {}, 24, {}};
  aud.media.audios.push_back(test::FixtureAudio("audio/speech_16k_pcm16.wav"));
  cases.push_back(aud);
  Case both{"image_audio", "<|user|><|image_1|><|audio_1|>Does the sound match?<|end|><|assistant|>", {}, 24, {}};
  both.media.images.push_back(test::FixtureImage("images/tiny_5x7.png"));
  both.media.audios.push_back(test::FixtureAudio("audio/tone_1s_16k.wav"));
  cases.push_back(both);
  Case sampled{"seeded", "<|user|>Name three colours.<|end|><|assistant|>", {}, 40, {}};
  sampled.sampling.temperature = 0.9f;
  sampled.sampling.top_k = 40;
  sampled.sampling.top_p = 0.95f;
  sampled.sampling.seed = 7;
  sampled.sampling.logprobs = true;
  sampled.sampling.top_logprobs = 3;
  cases.push_back(sampled);
  Case penalised{"penalised", "<|user|>Count to ten.<|end|><|assistant|>", {}, 40, {}};
  penalised.sampling.repetition_penalty = 1.3f;
  penalised.sampling.frequency_penalty = 0.4f;
  cases.push_back(penalised);
  int64_t accepted = 0;
  for (const Case& c : cases) {
    auto prep = PreparePrompt(*model, c.prompt, c.media);
    ASSERT_TRUE(prep.ok()) << prep.status().ToString();
    GenerateOptions go;
    go.max_new_tokens = c.max_new;
    go.sampling = c.sampling;
    go.stop_ids = {-1};  // no stop id: every case runs its whole budget
    accepted += ExpectSameAnswer(model, prep->ids, prep->mode, &prep->features, go, GetParam() + " " + c.name);
  }
  EXPECT_GT(accepted, 0) << "no draft was ever accepted: the cases test nothing of verification";
}

INSTANTIATE_TEST_SUITE_P(Layouts, SpeculativeSession, ::testing::Values("orig", "native"));

TEST(SpeculativeGenerate, HundredsOfRandomPromptsGiveTheSameGreedyAnswers) {
  auto model = test::TinyModel("orig");
  std::mt19937 rng(2026);
  int64_t accepted = 0, drafted = 0;
  for (int p = 0; p < 200; ++p) {
    // Random ids of ordinary text tokens, some prompts with a repeated stretch to copy from.
    std::vector<int32_t> ids(4 + rng() % 40);
    for (int32_t& id : ids) id = static_cast<int32_t>(rng() % 199000);
    if (p % 3 == 0) ids.insert(ids.end(), ids.begin(), ids.begin() + static_cast<int64_t>(ids.size() / 2));
    GenerateOptions go;
    go.max_new_tokens = 8 + rng() % 16;
    go.stop_ids = {-1};
    if (p % 5 == 4) {
      go.sampling.temperature = 0.7f;
      go.sampling.seed = static_cast<uint64_t>(p);
    }
    const GenerateResult plain = GenerateWith(model, ids, LoraMode::kNone, nullptr, go, false);
    const GenerateResult spec = GenerateWith(model, ids, LoraMode::kNone, nullptr, go, true);
    ASSERT_EQ(spec.tokens, plain.tokens) << "prompt " << p;
    accepted += spec.accepted_draft_tokens;
    drafted += spec.draft_tokens;
  }
  EXPECT_GT(accepted, 50) << "of " << drafted << " drafted";
}

// The trained fixture continues text it has seen; a prompt that quotes a passage and starts it
// again is copied, so drafts are accepted in runs. Then 40 random prompts give the same answers.
TEST(SpeculativeGenerate, CopyingAndRandomPromptsOnTheTrainedFixture) {
  LoadOptions lo;
  lo.num_threads = 2;
  auto model = Model::Load(test::FixturePath("trained/orig"), lo);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  std::ifstream in(test::FixturePath("trained/heldout.txt"), std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  const std::string all = text.str();
  int64_t accepted = 0, drafted = 0, tokens = 0, steps = 0;
  for (size_t at : {0u, 2000u, 5000u, 9000u, 14000u, 20000u}) {
    ASSERT_LT(at + 600, all.size());
    const std::string passage = all.substr(at, 400);
    auto ids = (*model)->tokenizer().Encode(passage + "\n\n" + passage.substr(0, 60));
    ASSERT_TRUE(ids.ok());
    GenerateOptions go;
    go.max_new_tokens = 48;
    go.stop_ids = {-1};
    const GenerateResult plain = GenerateWith(*model, *ids, LoraMode::kNone, nullptr, go, false);
    const GenerateResult spec = GenerateWith(*model, *ids, LoraMode::kNone, nullptr, go, true);
    ASSERT_EQ(spec.tokens, plain.tokens) << "passage at " << at;
    accepted += spec.accepted_draft_tokens;
    drafted += spec.draft_tokens;
    tokens += static_cast<int64_t>(spec.tokens.size());
    steps += spec.decode_steps;
  }
  // And random prompts (ids of ordinary tokens, some with a repeated stretch), greedy and seeded.
  std::mt19937 rng(7);
  for (int p = 0; p < 40; ++p) {
    std::vector<int32_t> ids(4 + rng() % 24);
    for (int32_t& id : ids) id = static_cast<int32_t>(rng() % 199000);
    if (p % 2 == 0) ids.insert(ids.end(), ids.begin(), ids.end());
    GenerateOptions go;
    go.max_new_tokens = 16;
    go.stop_ids = {-1};
    if (p % 4 == 3) {
      go.sampling.temperature = 0.8f;
      go.sampling.seed = static_cast<uint64_t>(p);
    }
    const GenerateResult plain = GenerateWith(*model, ids, LoraMode::kNone, nullptr, go, false);
    const GenerateResult spec = GenerateWith(*model, ids, LoraMode::kNone, nullptr, go, true);
    ASSERT_EQ(spec.tokens, plain.tokens) << "random prompt " << p;
  }
  std::printf("[speculative] trained fixture, copying: %lld of %lld drafted ids accepted; %lld tokens in %lld steps\n",
              static_cast<long long>(accepted), static_cast<long long>(drafted), static_cast<long long>(tokens),
              static_cast<long long>(steps));
  // Measured: 98-120 of 172-332 drafted ids accepted, 288 tokens in 162-184 steps (1.57-1.78 per
  // step; the tuner's choices follow measured step times, so they vary with the machine's load).
  EXPECT_GT(accepted * 4, drafted);
  EXPECT_GT(tokens * 4, steps * 5);
}

TEST(SpeculativeGenerate, AChatTurnAfterASpeculativeAnswerEqualsTheOneAfterAPlainAnswer) {
  auto model = test::TinyModel("orig");
  GenerateOptions plain_opts;
  plain_opts.max_new_tokens = 30;
  GenerateOptions spec_opts = plain_opts;
  spec_opts.speculative.mode = SpeculativeMode::kNgram;
  Chat plain(model), spec(model);
  for (const char* turn : {"Say something twice.", "And again, twice.", "Once more."}) {
    auto a = plain.Send(turn, plain_opts);
    auto b = spec.Send(turn, spec_opts);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(b->tokens, a->tokens) << turn;
    EXPECT_EQ(spec.session().tokens(), plain.session().tokens()) << turn;
    EXPECT_EQ(spec.session().cached_tokens(), plain.session().cached_tokens()) << turn;
  }
}

TEST(SpeculativePool, LearnsContinuationsWithinItsMemory) {
  NgramPool pool(int64_t{64} << 10);
  EXPECT_TRUE(pool.on());
  EXPECT_EQ(pool.bytes(), 0);  // allocated at the first Add
  EXPECT_TRUE(pool.Lookup(std::vector<int32_t>{1, 2, 3}, 8).empty());
  pool.Add(std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7});
  EXPECT_GT(pool.bytes(), 0);
  EXPECT_LE(pool.bytes(), int64_t{64} << 10);
  EXPECT_EQ(pool.Lookup(std::vector<int32_t>{1, 2, 3}, 8), (std::vector<int32_t>{4, 5, 6, 7}));
  EXPECT_EQ(pool.Lookup(std::vector<int32_t>{1, 2, 3}, 2), (std::vector<int32_t>{4, 5}));
  // No 3-gram (9, 2, 3): the 2-gram (2, 3).
  EXPECT_EQ(pool.Lookup(std::vector<int32_t>{9, 2, 3}, 8), (std::vector<int32_t>{4, 5, 6, 7}));
  EXPECT_TRUE(pool.Lookup(std::vector<int32_t>{9, 9}, 8).empty());
  EXPECT_TRUE(pool.Lookup(std::vector<int32_t>{7}, 8).empty());  // one id is no n-gram
  EXPECT_EQ(pool.Lookup(std::vector<int32_t>{1, 2, 3}, 0), std::vector<int32_t>{});
  // The newest text wins.
  pool.Add(std::vector<int32_t>{1, 2, 3, 9, 9});
  EXPECT_EQ(pool.Lookup(std::vector<int32_t>{1, 2, 3}, 8), (std::vector<int32_t>{9, 9}));
  // Placeholders: no n-gram holds one, and a continuation stops before one.
  pool.Add(std::vector<int32_t>{20, 21, 22, kAudioTokenId, 23, kImageTokenId, kImageTokenId, 24, 25, 26});
  EXPECT_EQ(pool.Lookup(std::vector<int32_t>{20, 21}, 8), (std::vector<int32_t>{22}));
  EXPECT_TRUE(pool.Lookup(std::vector<int32_t>{21, 22}, 8).empty());
  EXPECT_TRUE(pool.Lookup(std::vector<int32_t>{kImageTokenId, 24}, 8).empty());
  EXPECT_EQ(pool.Lookup(std::vector<int32_t>{24, 25}, 8), (std::vector<int32_t>{26}));
  // Much more text than the table holds: the memory stays what it was.
  const int64_t bytes = pool.bytes();
  std::mt19937 rng(5);
  std::vector<int32_t> many(200000);
  for (int32_t& id : many) id = static_cast<int32_t>(rng() % 5000);
  pool.Add(many);
  EXPECT_EQ(pool.bytes(), bytes);
  NgramPool off(0);
  off.Add(many);
  EXPECT_FALSE(off.on());
  EXPECT_EQ(off.bytes(), 0);
  EXPECT_TRUE(off.Lookup(many, 8).empty());
}

// A request drafts from what an earlier request's answer continued the same ids with: the same
// answers as without the pool (and as a plain engine), with drafts from the pool taken.
TEST(SpeculativePool, ALaterRequestDraftsFromAnEarlierAnswer) {
  auto model = test::TinyModel("orig");
  auto prompt = model->tokenizer().Encode("<|user|>Tell me a short story about a robot.<|end|><|assistant|>");
  ASSERT_TRUE(prompt.ok());
  std::vector<std::vector<int32_t>> answers[2];
  EngineStats stats[2];
  for (int pooled = 0; pooled < 2; ++pooled) {
    EngineOptions eo;
    eo.ngram_pool_bytes = pooled ? int64_t{1} << 20 : 0;
    eo.prefix_cache_bytes = 0;
    auto engine = Engine::Start(model, eo);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    for (int i = 0; i < 2; ++i) {
      EngineRequest req;
      req.prompt_ids = *prompt;
      req.generate.max_new_tokens = 40;
      req.generate.stop_ids = {-1};
      req.generate.speculative.mode = SpeculativeMode::kNgram;
      auto h = (*engine)->Submit(std::move(req));
      ASSERT_TRUE(h.ok());
      auto r = h->Wait();
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      answers[pooled].push_back(r->generation.tokens);
    }
    stats[pooled] = (*engine)->stats();
  }
  Session plain(model);
  GenerateOptions go;
  go.max_new_tokens = 40;
  go.stop_ids = {-1};
  auto want = plain.Generate(*prompt, LoraMode::kNone, go);
  ASSERT_TRUE(want.ok());
  for (int pooled = 0; pooled < 2; ++pooled)
    for (const auto& a : answers[pooled]) EXPECT_EQ(a, want->tokens) << (pooled ? "with the pool" : "without");
  EXPECT_EQ(stats[0].pool_draft_tokens, 0);
  EXPECT_EQ(stats[0].ngram_pool_bytes, 0);
  EXPECT_GT(stats[1].pool_accepted_tokens, 0);
  EXPECT_LE(stats[1].pool_accepted_tokens, stats[1].pool_draft_tokens);
  EXPECT_GT(stats[1].accepted_draft_tokens, stats[0].accepted_draft_tokens);
  EXPECT_LE(stats[1].ngram_pool_bytes, int64_t{1} << 20);
  EXPECT_GT(stats[1].ngram_pool_bytes, 0);
}

}  // namespace
}  // namespace phi4mm
