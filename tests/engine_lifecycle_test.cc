// The batched engine's request lifecycle on the tiny model: cancellation and deadlines in every
// phase give the KV reservation back at once; admission refuses what could never fit and queues
// what does not fit now; 200 random admit/cancel/expire/finish sequences end with nothing
// reserved; the prefix and media caches serve a chat's second turn (no vision encoder, only the
// new tokens prefilled, the same tokens as a fresh run) and never match across a changed image,
// dynamic_hd or LoRA mode. Also SHA-256 against FIPS 180-4's vectors.
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>

#include "phi4mm/base/sha256.h"
#include "phi4mm/runtime/engine.h"
#include "test_util.h"

namespace phi4mm {
namespace {

using test::FixturePath;
using namespace std::chrono_literals;

const char* kPrompt = "<|user|>Write a long poem about the sea.<|end|><|assistant|>";

std::shared_ptr<const Model> Tiny() { return test::TinyModel("orig"); }

std::unique_ptr<Engine> StartEngine(EngineOptions eo = {}) {
  auto e = Engine::Start(Tiny(), eo);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? std::move(e).value() : nullptr;
}

EngineRequest Request(const std::string& prompt, int64_t max_new) {
  EngineRequest r;
  r.prompt = prompt;
  r.generate.max_new_tokens = max_new;
  r.generate.stop_ids = {-1};  // never stop early: the length is what the test controls
  return r;
}

Image TinyImage(const std::string& name = "images/tiny_5x7.png") { return test::FixtureImage(name); }

TEST(Sha256, FipsVectors) {
  Sha256 a;
  a.Update("abc", 3);
  EXPECT_EQ(DigestHex(a.Finish()), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  Sha256 b;
  const std::string two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  b.Update(two.data(), 10);
  b.Update(two.data() + 10, two.size() - 10);
  EXPECT_EQ(DigestHex(b.Finish()), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  Sha256 c;
  const std::string million(1000000, 'a');
  c.Update(million.data(), million.size());
  EXPECT_EQ(DigestHex(c.Finish()), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(EngineLifecycle, CancelWhileDecodingFreesTheReservationAtOnce) {
  auto engine = StartEngine();
  std::atomic<int> seen{0};
  EngineRequest r = Request(kPrompt, 400);
  r.on_event = [&](const StreamEvent&) { return ++seen < 3; };  // the third token cancels
  auto h = engine->Submit(std::move(r));
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  auto res = h->Wait();
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->generation.finish, FinishReason::kCancelled);
  EXPECT_EQ(res->generation.tokens.size(), 3u);
  EXPECT_EQ(engine->stats().kv_reserved_bytes, 0);
  EXPECT_EQ(engine->stats().cancelled, 1);
}

TEST(EngineLifecycle, StepProfileTimesDecodeStepsOnlyWhenAskedAndChangesNoToken) {
  std::vector<std::vector<int32_t>> answers[2];
  for (bool profile : {false, true}) {
    EngineOptions eo;
    eo.profile_steps = profile;
    auto engine = StartEngine(eo);
    ASSERT_NE(engine, nullptr);
    std::vector<RequestHandle> hs;
    for (int i = 0; i < 2; ++i) {
      auto h = engine->Submit(Request(kPrompt, 6));
      ASSERT_TRUE(h.ok()) << h.status().ToString();
      hs.push_back(std::move(*h));
    }
    for (auto& h : hs) {
      auto res = h.Wait();
      ASSERT_TRUE(res.ok()) << res.status().ToString();
      answers[profile].push_back(res->generation.tokens);
    }
    const EngineStats st = engine->stats();
    const EngineStats::DecodeProfile& p = st.decode_profile;
    if (!profile) {
      EXPECT_EQ(p.steps, 0);
      EXPECT_EQ(p.rows, 0);
      EXPECT_EQ(p.decoder.sum(), 0.0);
      continue;
    }
    // Decode-only steps: at least one (each request decodes 5 tokens after its prompt), never
    // more than all steps, one to two rows each.
    EXPECT_GT(p.steps, 0);
    EXPECT_LE(p.steps, st.steps);
    EXPECT_GE(p.rows, p.steps);
    EXPECT_LE(p.rows, std::min<int64_t>(2 * p.steps, st.decode_rows));
    for (double part : {p.decoder.qkv, p.decoder.attention, p.decoder.o, p.decoder.gate_up, p.decoder.activation,
                        p.decoder.down, p.outside_layers, p.lm_head, p.sampling})
      EXPECT_GE(part, 0.0);
    EXPECT_GT(p.decoder.sum(), 0.0);
    EXPECT_GT(p.lm_head, 0.0);
  }
  EXPECT_EQ(answers[1], answers[0]);
}

TEST(EngineLifecycle, HandleCancelEndsQueuedAndRunningRequests) {
  EngineOptions eo;
  eo.max_running = 1;
  auto engine = StartEngine(eo);
  std::atomic<int> tokens{0};
  EngineRequest first = Request(kPrompt, 100000);
  first.on_event = [&](const StreamEvent&) {
    ++tokens;
    return true;
  };
  auto running = engine->Submit(std::move(first));
  ASSERT_TRUE(running.ok());
  while (tokens < 2) std::this_thread::sleep_for(1ms);
  auto queued = engine->Submit(Request(kPrompt, 10));
  ASSERT_TRUE(queued.ok());
  // The engine thread moves it to the waiting list at its next iteration (a step can take a while
  // under the sanitizers).
  for (int i = 0; i < 20000 && engine->stats().waiting != 1; ++i) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(engine->stats().waiting, 1);
  // The running request holds what its cache needs now, in whole blocks, not its worst case.
  const int64_t reserved = engine->stats().kv_reserved_bytes;
  EXPECT_GT(reserved, 0);
  EXPECT_EQ(reserved % engine->KvBytesFor(engine->options().kv_block), 0);
  EXPECT_LT(reserved, engine->KvBytesFor(engine->model().context_length()));
  queued->Cancel();
  auto q = queued->Wait();
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->generation.finish, FinishReason::kCancelled);
  EXPECT_TRUE(q->generation.tokens.empty());
  running->Cancel();
  auto r = running->Wait();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->generation.finish, FinishReason::kCancelled);
  EXPECT_EQ(engine->stats().kv_reserved_bytes, 0);
}

TEST(EngineLifecycle, CancelWhileEncodingAnImage) {
  EngineOptions eo;
  eo.vision_layers_per_slice = 1;
  eo.prefill_chunk = 4;  // a long prefill after the encoder: the cancel lands before any token
  auto engine = StartEngine(eo);
  EngineRequest r = Request("<|user|><|image_1|>Describe it.<|end|><|assistant|>", 4);
  r.media.images.push_back(TinyImage());
  r.prompt_options.dynamic_hd = 2;
  auto h = engine->Submit(std::move(r));
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  // Wait until the encoder has started, then cancel.
  while (engine->stats().vision_crops == 0 && !h->done()) std::this_thread::sleep_for(100us);
  h->Cancel();
  auto res = h->Wait();
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->generation.finish, FinishReason::kCancelled);
  EXPECT_TRUE(res->generation.tokens.empty());
  EXPECT_EQ(engine->stats().kv_reserved_bytes, 0);
  EXPECT_EQ(engine->stats().running, 0);
}

TEST(EngineLifecycle, DeadlineEndsTheRequestAndFreesItsCache) {
  auto engine = StartEngine();
  EngineRequest r = Request(kPrompt, 100000);
  r.deadline = std::chrono::steady_clock::now() + 50ms;
  auto h = engine->Submit(std::move(r));
  ASSERT_TRUE(h.ok());
  auto res = h->Wait();
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->generation.finish, FinishReason::kDeadline);
  EXPECT_LT(res->total_seconds, 5.0);
  EXPECT_EQ(engine->stats().kv_reserved_bytes, 0);
  EXPECT_EQ(engine->stats().expired, 1);
  // A deadline already past ends a request without running it.
  EngineRequest late = Request(kPrompt, 10);
  late.deadline = std::chrono::steady_clock::now() - 1ms;
  auto h2 = engine->Submit(std::move(late));
  ASSERT_TRUE(h2.ok());
  auto r2 = h2->Wait();
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(r2->generation.finish, FinishReason::kDeadline);
  EXPECT_TRUE(r2->generation.tokens.empty());
}

TEST(EngineLifecycle, AdmissionRefusesWhatCanNeverFitAndQueuesWhatDoesNotFitNow) {
  EngineOptions probe_opts;
  auto probe = StartEngine(probe_opts);
  const int64_t per_pos = probe->KvBytesFor(1);
  probe.reset();
  EngineOptions eo;
  eo.kv_budget_bytes = 60 * per_pos;
  auto engine = StartEngine(eo);
  // 13-token prompt + 100 new tokens can never fit 60 positions: refused at once, naming the budget.
  auto big = engine->Submit(Request(kPrompt, 100));
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(big.status().message().find("KV budget"), std::string::npos) << big.status().message();
  // Two requests of ~40 positions: the second waits for the first, and the budget always holds.
  std::atomic<int64_t> worst{0};
  Engine* e = engine.get();
  auto watch = [&](const StreamEvent&) {
    worst = std::max<int64_t>(worst, e->stats().kv_reserved_bytes);
    return true;
  };
  EngineRequest a = Request(kPrompt, 25), b = Request(kPrompt, 25);
  a.on_event = watch;
  b.on_event = watch;
  auto ha = engine->Submit(std::move(a));
  auto hb = engine->Submit(std::move(b));
  ASSERT_TRUE(ha.ok() && hb.ok());
  auto ra = ha->Wait(), rb = hb->Wait();
  ASSERT_TRUE(ra.ok() && rb.ok());
  EXPECT_EQ(ra->generation.tokens.size(), 25u);
  EXPECT_EQ(rb->generation.tokens.size(), 25u);
  EXPECT_GT(rb->queue_seconds, 0.0);
  EXPECT_LE(worst.load(), eo.kv_budget_bytes);
  EXPECT_EQ(ra->generation.tokens, rb->generation.tokens);  // same prompt, greedy
  EXPECT_EQ(engine->stats().kv_reserved_bytes, 0);
}

TEST(EngineLifecycle, QueueLimitIsResourceExhausted) {
  EngineOptions eo;
  eo.max_running = 1;
  eo.max_queue = 1;
  auto engine = StartEngine(eo);
  std::vector<RequestHandle> hs;
  Status refused;
  for (int i = 0; i < 6 && refused.ok(); ++i) {
    auto h = engine->Submit(Request(kPrompt, 100000));
    if (h.ok()) hs.push_back(*h);
    else refused = h.status();
  }
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted) << refused.ToString();
  for (auto& h : hs) h.Cancel();
  for (auto& h : hs) EXPECT_TRUE(h.Wait().ok());
  EXPECT_EQ(engine->stats().kv_reserved_bytes, 0);
}

TEST(EngineLifecycle, TwoHundredRandomLifecyclesEndWithNothingReserved) {
  EngineOptions eo;
  eo.max_running = 5;
  eo.max_queue = 300;
  eo.prefill_chunk = 16;
  auto engine = StartEngine(eo);
  std::mt19937 rng(1234);
  std::vector<RequestHandle> hs;
  std::vector<int> kinds;
  const std::vector<std::string> prompts = {kPrompt, "<|user|>Hi<|end|><|assistant|>",
                                            "<|system|>Be brief.<|end|><|user|>Count to ten.<|end|><|assistant|>"};
  for (int i = 0; i < 200; ++i) {
    EngineRequest r = Request(prompts[rng() % prompts.size()], 1 + rng() % 12);
    const int kind = static_cast<int>(rng() % 4);  // 0 finish, 1 cancel by callback, 2 cancel by handle, 3 deadline
    if (kind == 1) {
      const int after = 1 + static_cast<int>(rng() % 3);
      auto n = std::make_shared<int>(0);
      r.on_event = [n, after](const StreamEvent&) { return ++*n < after; };
    }
    if (kind == 3) r.deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(rng() % 20000);
    auto h = engine->Submit(std::move(r));
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    if (kind == 2 && rng() % 2) h->Cancel();
    hs.push_back(*h);
    kinds.push_back(kind);
    if (rng() % 8 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
  }
  for (size_t i = 0; i < hs.size(); ++i) {
    if (kinds[i] == 2) hs[i].Cancel();
    auto r = hs[i].Wait();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    if (kinds[i] == 0) {
      EXPECT_EQ(r->generation.finish, FinishReason::kMaxTokens);
    }
  }
  const EngineStats st = engine->stats();
  EXPECT_EQ(st.kv_reserved_bytes, 0);
  EXPECT_EQ(st.running, 0);
  EXPECT_EQ(st.waiting, 0);
  EXPECT_EQ(st.finished + st.cancelled + st.expired, 200);
}

// The second turn of a chat about an image, resent whole as OpenAI clients do.
struct Turns {
  std::string first, second;
};
Turns ImageChat(const std::string& answer) {
  const std::string t1 = "<|user|><|image_1|>What is in this picture?<|end|><|assistant|>";
  return {t1, t1 + answer + "<|end|><|user|>And what colour is it?<|end|><|assistant|>"};
}

Result<RequestResult> RunOne(Engine& e, const std::string& prompt, const MediaInputs& media, int64_t max_new,
                             int64_t dynamic_hd = 0, bool has_image = false) {
  EngineRequest r = Request(prompt, max_new);
  r.media = media;
  r.prompt_options.dynamic_hd = dynamic_hd;
  r.prompt_options.conversation_has_image = has_image;
  auto h = e.Submit(std::move(r));
  if (!h.ok()) return h.status();
  return h->Wait();
}

TEST(EnginePrefixCache, SecondTurnRunsNoEncoderAndPrefillsOnlyTheNewTokens) {
  auto engine = StartEngine();
  MediaInputs media;
  media.images.push_back(TinyImage());
  const Turns t0 = ImageChat("");
  auto r1 = RunOne(*engine, t0.first, media, 4);
  ASSERT_TRUE(r1.ok()) << r1.status().ToString();
  EXPECT_EQ(r1->images_encoded, 1);
  ASSERT_EQ(r1->image_encode_seconds.size(), 1u);  // one timed encoder run, no audio
  EXPECT_GT(r1->image_encode_seconds[0], 0.0);
  EXPECT_LE(r1->image_encode_seconds[0], r1->total_seconds);
  EXPECT_TRUE(r1->audio_encode_seconds.empty());
  const Turns t = ImageChat(r1->generation.text);
  auto r2 = RunOne(*engine, t.second, media, 4);
  ASSERT_TRUE(r2.ok()) << r2.status().ToString();
  EXPECT_EQ(r2->images_encoded, 0);
  EXPECT_TRUE(r2->image_encode_seconds.empty());
  // At least the whole first prompt came from the cache; only the rest was prefilled.
  EXPECT_GE(r2->cached_prompt_tokens, r1->count.total_tokens);
  EXPECT_EQ(r2->generation.prompt_tokens, r2->count.total_tokens - r2->cached_prompt_tokens);
  EXPECT_LT(r2->generation.prompt_tokens, r2->count.total_tokens - r1->count.total_tokens + 8);
  // The same tokens as a fresh engine with no caches.
  EngineOptions cold;
  cold.prefix_cache_bytes = 0;
  cold.media_cache_bytes = 0;
  auto fresh_engine = StartEngine(cold);
  auto fresh = RunOne(*fresh_engine, t.second, media, 4);
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  EXPECT_EQ(fresh->cached_prompt_tokens, 0);
  EXPECT_EQ(fresh->images_encoded, 1);
  EXPECT_EQ(r2->generation.tokens, fresh->generation.tokens);
  EXPECT_GE(engine->stats().prefix.hits, 1);
}

TEST(EnginePrefixCache, MediaCacheServesTheSameImageInANewConversation) {
  EngineOptions eo;
  eo.prefix_cache_bytes = 0;
  auto engine = StartEngine(eo);
  MediaInputs media;
  media.images.push_back(TinyImage());
  auto r1 = RunOne(*engine, "<|user|><|image_1|>Describe.<|end|><|assistant|>", media, 2);
  auto r2 = RunOne(*engine, "<|user|>Look:<|image_1|>Is it a cat?<|end|><|assistant|>", media, 2);
  ASSERT_TRUE(r1.ok() && r2.ok());
  EXPECT_EQ(r1->images_encoded, 1);
  EXPECT_EQ(r2->images_encoded, 0);
  EXPECT_EQ(engine->stats().media.hits, 1);
  EXPECT_EQ(engine->stats().images_encoded, 1);
}

TEST(EnginePrefixCache, ChangedImageDynamicHdOrLoraModeNeverReuses) {
  auto engine = StartEngine();
  MediaInputs cat;
  cat.images.push_back(TinyImage());
  MediaInputs other;
  other.images.push_back(TinyImage("images/bmp_130x70.bmp"));
  const std::string p = "<|user|><|image_1|>What is in this picture?<|end|><|assistant|>";
  auto base = RunOne(*engine, p, cat, 2, 2);
  ASSERT_TRUE(base.ok()) << base.status().ToString();
  // The prefix before the image ("<|user|>") may match; nothing from the image on may.
  const int64_t before_image = 1;
  auto changed = RunOne(*engine, p, other, 2, 2);
  ASSERT_TRUE(changed.ok()) << changed.status().ToString();
  EXPECT_LE(changed->cached_prompt_tokens, before_image);
  EXPECT_EQ(changed->images_encoded, 1);
  auto hd = RunOne(*engine, p, cat, 2, 1);
  ASSERT_TRUE(hd.ok()) << hd.status().ToString();
  EXPECT_LE(hd->cached_prompt_tokens, before_image);
  EXPECT_EQ(hd->images_encoded, 1);
  // Text cached in one LoRA mode is not reused by a request in another.
  const std::string text = "<|user|>Tell me about the ocean and its tides.<|end|><|assistant|>";
  auto none = RunOne(*engine, text, {}, 2);
  auto vision = RunOne(*engine, text, {}, 2, 0, /*has_image=*/true);
  auto again = RunOne(*engine, text, {}, 2);
  ASSERT_TRUE(none.ok() && vision.ok() && again.ok());
  EXPECT_EQ(vision->cached_prompt_tokens, 0);
  EXPECT_EQ(again->cached_prompt_tokens, again->count.total_tokens - 1);
  EXPECT_EQ(none->generation.tokens, again->generation.tokens);
}

}  // namespace
}  // namespace phi4mm
