// The batched engine's KV cache that grows on demand, on the tiny model: a request reserves what
// its cache holds now and grows a block at a time, so requests with generous max_tokens run side
// by side; when the budget runs out the youngest running request is preempted (its cache swapped
// out to a file, or dropped and recomputed) and finishes later with exactly the tokens it gets
// when it runs alone; the budget is never exceeded and nothing stays reserved or swapped.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "phi4mm/runtime/engine.h"
#include "test_util.h"

namespace phi4mm {
namespace {

std::shared_ptr<const Model> Tiny() { return test::TinyModel("orig"); }

std::unique_ptr<Engine> StartEngine(const EngineOptions& eo) {
  auto e = Engine::Start(Tiny(), eo);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? std::move(e).value() : nullptr;
}

const std::vector<std::string> kPrompts = {
    "<|user|>Write a long poem about the sea.<|end|><|assistant|>",
    "<|user|>Name every river you know.<|end|><|assistant|>",
    "<|user|>Explain LoRA in one sentence.<|end|><|assistant|>",
    "<|user|>What is the capital of France?<|end|><|assistant|>",
    "<|user|>Count from one to one hundred.<|end|><|assistant|>",
    "<|user|>Tell me a story about a lighthouse keeper.<|end|><|assistant|>",
    "<|user|>List the planets and their moons.<|end|><|assistant|>",
    "<|user|>Describe a walk through a forest in autumn.<|end|><|assistant|>",
};

EngineRequest Request(const std::string& prompt, int64_t max_new, bool never_stop, uint64_t seed) {
  EngineRequest r;
  r.prompt = prompt;
  r.generate.max_new_tokens = max_new;
  if (never_stop) r.generate.stop_ids = {-1};
  // Sampled, so that a request's continuation depends on its sampler's state surviving preemption.
  r.generate.sampling.temperature = 0.8f;
  r.generate.sampling.seed = seed;
  return r;
}

// Each request alone, one after the other on an engine with room for everything.
std::vector<std::vector<int32_t>> Alone(int n, int64_t max_new, bool never_stop) {
  EngineOptions eo;
  eo.kv_budget_bytes = int64_t{256} << 20;
  auto engine = StartEngine(eo);
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < n; ++i) {
    auto h = engine->Submit(Request(kPrompts[static_cast<size_t>(i)], max_new, never_stop, 1000 + static_cast<uint64_t>(i)));
    EXPECT_TRUE(h.ok()) << h.status().ToString();
    auto r = h->Wait();
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    out.push_back(r.ok() ? r->generation.tokens : std::vector<int32_t>{});
  }
  return out;
}

struct Together {
  std::vector<std::vector<int32_t>> tokens;
  EngineStats stats;
  int64_t most_reserved = 0, most_running = 0;
};

Together RunTogether(EngineOptions eo, int n, int64_t max_new, bool never_stop) {
  auto engine = StartEngine(eo);
  Engine* e = engine.get();
  std::atomic<int64_t> most_reserved{0}, most_running{0};
  std::vector<RequestHandle> hs;
  for (int i = 0; i < n; ++i) {
    EngineRequest r = Request(kPrompts[static_cast<size_t>(i)], max_new, never_stop, 1000 + static_cast<uint64_t>(i));
    r.on_event = [&, e](const StreamEvent&) {
      const EngineStats st = e->stats();
      most_reserved = std::max(most_reserved.load(), st.kv_reserved_bytes);
      most_running = std::max(most_running.load(), st.running);
      return true;
    };
    auto h = engine->Submit(std::move(r));
    EXPECT_TRUE(h.ok()) << h.status().ToString();
    if (h.ok()) hs.push_back(*h);
  }
  Together t;
  for (auto& h : hs) {
    auto r = h.Wait();
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    t.tokens.push_back(r.ok() ? r->generation.tokens : std::vector<int32_t>{});
  }
  t.stats = engine->stats();
  t.most_reserved = most_reserved;
  t.most_running = most_running;
  return t;
}

class EngineKv : public ::testing::TestWithParam<bool> {};  // swapping on (true) or recompute

// Six requests of ~200 positions each against a budget of ~2.5 of them: the youngest are
// preempted again and again, and each still ends with the tokens it gets alone.
TEST_P(EngineKv, PreemptedRequestsEndWithTheirTokensAlone) {
  const bool swap = GetParam();
  constexpr int kN = 6;
  constexpr int64_t kNew = 180;
  const auto alone = Alone(kN, kNew, /*never_stop=*/true);
  EngineOptions eo;
  eo.max_running = kN;
  eo.kv_block = 16;
  eo.kv_budget_bytes = Tiny()->decoder().kv_bytes_per_token() * 500;
  eo.kv_swap_bytes = swap ? -1 : 0;
  const Together t = RunTogether(eo, kN, kNew, /*never_stop=*/true);
  ASSERT_EQ(t.tokens.size(), alone.size());
  for (int i = 0; i < kN; ++i) {
    EXPECT_EQ(t.tokens[static_cast<size_t>(i)].size(), static_cast<size_t>(kNew)) << "request " << i;
    EXPECT_EQ(t.tokens[static_cast<size_t>(i)], alone[static_cast<size_t>(i)]) << "request " << i;
  }
  std::printf("[kv] %s: %lld preemptions, %lld swapped back in, %lld recomputed; most reserved %lld of %lld bytes\n",
              swap ? "swap" : "recompute", static_cast<long long>(t.stats.preempted),
              static_cast<long long>(t.stats.swapped_in), static_cast<long long>(t.stats.recomputed),
              static_cast<long long>(t.most_reserved), static_cast<long long>(eo.kv_budget_bytes));
  EXPECT_GT(t.stats.preempted, 0);
  EXPECT_GT(swap ? t.stats.swapped_in : t.stats.recomputed, 0);
  EXPECT_EQ(swap ? t.stats.recomputed : t.stats.swapped_in, 0);
  EXPECT_LE(t.most_reserved, eo.kv_budget_bytes);
  EXPECT_EQ(t.stats.kv_reserved_bytes, 0);
  EXPECT_EQ(t.stats.kv_swap_bytes, 0);
  EXPECT_EQ(t.stats.running + t.stats.waiting, 0);
}

INSTANTIATE_TEST_SUITE_P(SwapOrRecompute, EngineKv, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Swap" : "Recompute"; });

// Eight requests that each ask for 20,000 new tokens (the whole context) on a budget of two
// contexts: reserving their worst case would run them two at a time; they run all eight together.
TEST(EngineKvGrowth, GenerousMaxTokensRunTogether) {
  constexpr int kN = 8;
  const auto alone = Alone(kN, 20000, /*never_stop=*/false);
  EngineOptions eo;
  eo.max_running = kN;
  eo.kv_block = 16;  // the tiny model's context is 512 positions: blocks in proportion
  eo.kv_budget_bytes = Tiny()->decoder().kv_bytes_per_token() * Tiny()->context_length() * 2;
  const Together t = RunTogether(eo, kN, 20000, /*never_stop=*/false);
  for (int i = 0; i < kN; ++i) EXPECT_EQ(t.tokens[static_cast<size_t>(i)], alone[static_cast<size_t>(i)]) << "request " << i;
  std::printf("[kv] 8 x max_tokens 20000 on a budget of 2 contexts: %lld running at once at most, %lld preemptions\n",
              static_cast<long long>(t.most_running), static_cast<long long>(t.stats.preempted));
  EXPECT_EQ(t.most_running, kN);
  EXPECT_LE(t.most_reserved, eo.kv_budget_bytes);
  EXPECT_EQ(t.stats.kv_reserved_bytes, 0);
}

}  // namespace
}  // namespace phi4mm
