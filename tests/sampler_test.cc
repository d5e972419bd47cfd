// Sampler unit tests on hand-made logits: greedy is the first argmax; top-k 1 is greedy; top-p and
// min-p restrict the candidates exactly; the repetition penalty follows transformers (divide
// positive logits, multiply negative ones); ids at or above the sampling vocabulary are never drawn.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "phi4mm/runtime/sampler.h"

namespace phi4mm {
namespace {

TEST(Sampler, GreedyIsFirstArgmax) {
  std::vector<float> l = {1, 5, 5, 2};
  Sampler s(SamplingOptions{}, 4);
  EXPECT_EQ(s.Next(l, {}), 1);
}

TEST(Sampler, RepetitionPenaltyFollowsTransformers) {
  SamplingOptions o;
  o.repetition_penalty = 2.0f;
  std::vector<float> l = {4.0f, 3.0f, -1.0f};
  const std::vector<int32_t> history = {0, 2, 0};
  Sampler s(o, 3);
  EXPECT_EQ(s.Next(l, history), 1);  // 4/2 = 2 < 3
  EXPECT_FLOAT_EQ(l[0], 2.0f);
  EXPECT_FLOAT_EQ(l[2], -2.0f);
}

std::set<int32_t> Draws(SamplingOptions o, std::vector<float> logits, int64_t vocab, int n = 400) {
  std::set<int32_t> seen;
  Sampler s(o, vocab);
  for (int i = 0; i < n; ++i) {
    std::vector<float> l = logits;
    seen.insert(s.Next(l, {}));
  }
  return seen;
}

TEST(Sampler, TopKOneIsGreedy) {
  SamplingOptions o;
  o.temperature = 1.0f;
  o.top_k = 1;
  EXPECT_EQ(Draws(o, {0.1f, 0.3f, 0.2f}, 3), (std::set<int32_t>{1}));
}

TEST(Sampler, TopPKeepsTheSmallestPrefixReachingP) {
  // Probabilities ~ 0.6, 0.3, 0.1 (logits ln of those).
  std::vector<float> l = {std::log(0.6f), std::log(0.3f), std::log(0.1f)};
  SamplingOptions o;
  o.temperature = 1.0f;
  o.top_p = 0.85f;
  EXPECT_EQ(Draws(o, l, 3), (std::set<int32_t>{0, 1}));
  o.top_p = 0.5f;
  EXPECT_EQ(Draws(o, l, 3), (std::set<int32_t>{0}));
}

TEST(Sampler, MinPDropsUnlikelyTokens) {
  std::vector<float> l = {std::log(0.6f), std::log(0.3f), std::log(0.1f)};
  SamplingOptions o;
  o.temperature = 1.0f;
  o.min_p = 0.4f;  // threshold 0.24
  EXPECT_EQ(Draws(o, l, 3), (std::set<int32_t>{0, 1}));
}

TEST(Sampler, NeverSamplesIdsWithoutAString) {
  std::vector<float> l = {0.0f, 0.0f, 10.0f, 10.0f};
  SamplingOptions o;
  o.temperature = 1.0f;
  EXPECT_EQ(Draws(o, l, 2), (std::set<int32_t>{0, 1}));
}

TEST(Sampler, ValidatesOptions) {
  SamplingOptions o;
  EXPECT_TRUE(o.Validate().ok());
  o.min_p = 1.5f;
  EXPECT_FALSE(o.Validate().ok());
  o = {};
  o.repetition_penalty = 0.0f;
  EXPECT_FALSE(o.Validate().ok());
  o = {};
  o.top_k = -3;
  EXPECT_FALSE(o.Validate().ok());
}

}  // namespace
}  // namespace phi4mm
