// Sampler unit tests on hand-made logits: greedy is the first argmax; top-k 1 is greedy; top-p and
// min-p restrict the candidates exactly; the repetition penalty follows transformers (divide
// positive logits, multiply negative ones); ids at or above the sampling vocabulary are never drawn.
// The OpenAI options, each alone with exact expected values: the logit bias (greedy honours it), the
// frequency and presence penalties (generated ids only, with the prompt length given or taken from
// the first call), their order with the repetition penalty, the log-probabilities (a log-softmax
// summing to 1, the top list equal to a brute-force reference, independent of temperature and
// truncation), and a validation error naming the field for every out-of-range value.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>
#include <string>

#include "phi4mm/runtime/sampler.h"
#include "test_util.h"

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

// A large vocabulary whose top-p prefix is thousands of ids (the sampler sorts a prefix of 256 and
// widens it) and whose logit order is not the id order: every draw is inside the prefix a full
// sort gives, the draws reach deep into it, and min-p on top cuts it where a full sort would.
TEST(Sampler, TopPOverAWideVocabularyMatchesAFullSort) {
  const int64_t vocab = 5000;
  std::vector<float> l(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) l[static_cast<size_t>((i * 7919) % vocab)] = -0.001f * static_cast<float>(i);
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
  double total = 0;
  for (float v : l) total += std::exp(static_cast<double>(v - l[order[0]]));
  auto prefix = [&](double p) {
    double cum = 0;
    size_t k = 0;
    while (k < order.size()) {
      cum += std::exp(static_cast<double>(l[order[k++]] - l[order[0]]));
      if (cum >= p * total) break;
    }
    return std::set<int32_t>(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k));
  };
  SamplingOptions o;
  o.temperature = 1.0f;
  o.top_p = 0.8f;
  const std::set<int32_t> want = prefix(static_cast<double>(o.top_p));
  ASSERT_GT(want.size(), 1024u);  // wider than the first two sorted prefixes
  const std::set<int32_t> got = Draws(o, l, vocab, 4000);
  for (int32_t id : got) EXPECT_TRUE(want.count(id)) << id;
  EXPECT_GT(got.size(), want.size() / 2);
  // min-p 0.5: exp(l - max) >= 0.5, i.e. the ids whose logit is within log 2 of the maximum.
  o.min_p = 0.5f;
  std::set<int32_t> within;
  for (int32_t id : want)
    if (std::exp(static_cast<double>(l[id] - l[order[0]])) >= 0.5) within.insert(id);
  for (int32_t id : Draws(o, l, vocab, 4000)) EXPECT_TRUE(within.count(id)) << id;
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

TEST(Sampler, LogitBiasMakesATokenWinUnderGreedy) {
  SamplingOptions o;
  o.logit_bias = {{2, 4.0f}};
  std::vector<float> l = {1.0f, 5.0f, 2.0f};
  Sampler s(o, 3);
  EXPECT_EQ(s.Next(l, {}), 2);  // 2 + 4 = 6 > 5
  EXPECT_FLOAT_EQ(l[0], 1.0f);
  EXPECT_FLOAT_EQ(l[1], 5.0f);
  EXPECT_FLOAT_EQ(l[2], 6.0f);

  o.logit_bias = {{1, -100.0f}};
  l = {1.0f, 5.0f, 2.0f};
  Sampler ban(o, 3);
  EXPECT_EQ(ban.Next(l, {}), 2);
  EXPECT_FLOAT_EQ(l[1], -95.0f);
}

TEST(Sampler, LogitBiasAppliesWhenSampling) {
  SamplingOptions o;
  o.temperature = 1.0f;
  o.logit_bias = {{0, -100.0f}, {2, -100.0f}};
  EXPECT_EQ(Draws(o, {0.0f, 0.0f, 0.0f}, 3), (std::set<int32_t>{1}));
}

TEST(Sampler, FrequencyPenaltyCountsOnlyGeneratedTokens) {
  SamplingOptions o;
  o.frequency_penalty = 0.5f;
  const std::vector<int32_t> history = {0, 0, 3, 1, 2, 2};  // prompt {0, 0, 3}, generated {1, 2, 2}
  std::vector<float> l = {4.0f, 4.0f, 4.0f, 4.0f};
  Sampler s(o, 4);
  s.SetPromptLength(3);
  EXPECT_EQ(s.Next(l, history), 0);
  EXPECT_FLOAT_EQ(l[0], 4.0f);  // only in the prompt
  EXPECT_FLOAT_EQ(l[1], 3.5f);  // 4 - 1 * 0.5
  EXPECT_FLOAT_EQ(l[2], 3.0f);  // 4 - 2 * 0.5
  EXPECT_FLOAT_EQ(l[3], 4.0f);
}

TEST(Sampler, PresencePenaltyCountsOnlyGeneratedTokens) {
  SamplingOptions o;
  o.presence_penalty = 0.25f;
  const std::vector<int32_t> history = {0, 0, 3, 1, 2, 2};
  std::vector<float> l = {4.0f, 4.0f, 4.0f, 4.0f};
  Sampler s(o, 4);
  s.SetPromptLength(3);
  EXPECT_EQ(s.Next(l, history), 0);
  EXPECT_FLOAT_EQ(l[0], 4.0f);
  EXPECT_FLOAT_EQ(l[1], 3.75f);  // once or twice: the same
  EXPECT_FLOAT_EQ(l[2], 3.75f);
  EXPECT_FLOAT_EQ(l[3], 4.0f);
}

TEST(Sampler, FrequencyAndPresencePenaltiesAdd) {
  SamplingOptions o;
  o.frequency_penalty = 0.5f;
  o.presence_penalty = 0.25f;
  std::vector<float> l = {4.0f, 4.0f, 4.0f};
  Sampler s(o, 3);
  s.SetPromptLength(1);
  EXPECT_EQ(s.Next(l, std::vector<int32_t>{1, 1, 2, 2}), 0);
  EXPECT_FLOAT_EQ(l[0], 4.0f);
  EXPECT_FLOAT_EQ(l[1], 3.25f);  // generated once: 4 - 0.5 - 0.25
  EXPECT_FLOAT_EQ(l[2], 2.75f);  // generated twice: 4 - 1.0 - 0.25
}

TEST(Sampler, NegativeFrequencyPenaltyFavoursRepeats) {
  SamplingOptions o;
  o.frequency_penalty = -1.0f;
  std::vector<float> l = {5.0f, 4.0f};
  Sampler s(o, 2);
  s.SetPromptLength(0);
  EXPECT_EQ(s.Next(l, std::vector<int32_t>{1, 1}), 1);
  EXPECT_FLOAT_EQ(l[1], 6.0f);
}

TEST(Sampler, PromptLengthDefaultsToTheFirstHistory) {
  SamplingOptions o;
  o.frequency_penalty = 1.0f;
  Sampler s(o, 3);
  std::vector<float> l = {4.0f, 4.0f, 4.0f};
  EXPECT_EQ(s.Next(l, std::vector<int32_t>{0, 1, 1}), 0);  // all prompt: no penalty
  EXPECT_EQ(l, (std::vector<float>{4.0f, 4.0f, 4.0f}));
  l = {4.0f, 4.0f, 4.0f};
  EXPECT_EQ(s.Next(l, std::vector<int32_t>{0, 1, 1, 1}), 0);  // one generated 1
  EXPECT_EQ(l, (std::vector<float>{4.0f, 3.0f, 4.0f}));
}

TEST(Sampler, BiasThenRepetitionThenFrequency) {
  SamplingOptions o;
  o.logit_bias = {{0, 2.0f}};
  o.repetition_penalty = 2.0f;
  o.frequency_penalty = 0.5f;
  std::vector<float> l = {2.0f, 0.0f};
  Sampler s(o, 2);
  s.SetPromptLength(0);
  EXPECT_EQ(s.Next(l, std::vector<int32_t>{0}), 0);
  // (2 + 2) / 2 - 0.5; repetition first would give 2 / 2 + 2 - 0.5 = 2.5.
  EXPECT_FLOAT_EQ(l[0], 1.5f);
}

// The log-softmax the slow way: long double, no max subtraction (the logits here are small).
std::vector<long double> BruteLogSoftmax(const std::vector<float>& l) {
  long double sum = 0;
  for (float v : l) sum += std::exp(static_cast<long double>(v));
  std::vector<long double> out;
  for (float v : l) out.push_back(static_cast<long double>(v) - std::log(sum));
  return out;
}

// The n most likely ids, most likely first, equal values by increasing id, by sorting everything.
std::vector<int32_t> BruteTop(const std::vector<float>& l, size_t n) {
  std::vector<int32_t> ids(l.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
  ids.resize(std::min(n, ids.size()));
  return ids;
}

void ExpectTopMatchesBruteForce(const TokenLogprobs& got, const std::vector<float>& logits, size_t n) {
  const std::vector<long double> ref = BruteLogSoftmax(logits);
  const std::vector<int32_t> ids = BruteTop(logits, n);
  ASSERT_EQ(got.top.size(), ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(got.top[i].first, ids[i]) << "rank " << i;
    EXPECT_FLOAT_EQ(got.top[i].second, static_cast<float>(ref[ids[i]])) << "rank " << i;
    if (i > 0) {
      EXPECT_GE(got.top[i - 1].second, got.top[i].second) << "rank " << i;
    }
  }
  EXPECT_FLOAT_EQ(got.logprob, static_cast<float>(ref[got.id]));
}

TEST(Sampler, LogSoftmaxSumsToOne) {
  const std::vector<float> l = test::Gaussian(50000, 7, 4.0f);
  const std::vector<double> lp = LogSoftmax(l);
  ASSERT_EQ(lp.size(), l.size());
  double sum = 0;
  for (double v : lp) sum += std::exp(v);
  EXPECT_NEAR(sum, 1.0, 1e-9);
  const std::vector<long double> ref = BruteLogSoftmax(l);
  for (size_t i = 0; i < l.size(); i += 997) EXPECT_NEAR(lp[i], static_cast<double>(ref[i]), 1e-12) << i;
  // Large logits: the maximum is subtracted, so nothing overflows (exp(1000) would); the result is
  // exact up to the rounding of 1000 + ln 2 (one ulp of 1000 is 1.1e-13).
  const std::vector<double> big = LogSoftmax(std::vector<float>{1000.0f, 1000.0f});
  EXPECT_NEAR(big[0], -std::log(2.0), 2.3e-13);
  EXPECT_NEAR(big[1], -std::log(2.0), 2.3e-13);
}

TEST(Sampler, TopLogprobsUnderGreedy) {
  const std::vector<float> logits = {1.0f, 3.0f, -2.0f, 3.0f, 0.5f};
  SamplingOptions o;
  o.top_logprobs = 4;
  Sampler s(o, 5);
  ASSERT_TRUE(s.records_logprobs());
  std::vector<float> l = logits;
  EXPECT_EQ(s.Next(l, {}), 1);
  EXPECT_EQ(s.last_logprobs().id, 1);
  ExpectTopMatchesBruteForce(s.last_logprobs(), logits, 4);
  EXPECT_EQ(s.last_logprobs().top[0].first, 1);  // the tie with 3 goes to the lower id
  EXPECT_EQ(s.last_logprobs().top[1].first, 3);
}

TEST(Sampler, TopLogprobsOnALargeRow) {
  const std::vector<float> logits = test::Gaussian(3000, 11, 3.0f);
  SamplingOptions o;
  o.top_logprobs = kMaxTopLogprobs;
  Sampler s(o, 3000);
  std::vector<float> l = logits;
  const int32_t id = s.Next(l, {});
  EXPECT_EQ(id, ArgMax(logits));
  ExpectTopMatchesBruteForce(s.last_logprobs(), logits, kMaxTopLogprobs);
}

TEST(Sampler, LogprobsAreTakenAfterBiasAndPenalties) {
  SamplingOptions o;
  o.logprobs = true;
  o.logit_bias = {{0, 1.0f}};
  o.frequency_penalty = 2.0f;
  std::vector<float> l = {0.0f, 0.0f, 0.0f};
  Sampler s(o, 3);
  s.SetPromptLength(0);
  EXPECT_EQ(s.Next(l, std::vector<int32_t>{1}), 0);
  // Processed logits {1, -2, 0}.
  EXPECT_TRUE(s.last_logprobs().top.empty());
  EXPECT_FLOAT_EQ(s.last_logprobs().logprob, static_cast<float>(BruteLogSoftmax({1.0f, -2.0f, 0.0f})[0]));
}

TEST(Sampler, SampledLogprobsIgnoreTemperatureAndTruncation) {
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  const std::vector<long double> ref = BruteLogSoftmax(logits);
  SamplingOptions o;
  o.temperature = 0.5f;
  o.top_k = 3;
  o.top_p = 0.9f;
  o.top_logprobs = 4;
  o.seed = 3;
  Sampler s(o, 4);
  std::set<int32_t> seen;
  for (int i = 0; i < 200; ++i) {
    std::vector<float> l = logits;
    const int32_t id = s.Next(l, {});
    seen.insert(id);
    EXPECT_EQ(s.last_logprobs().id, id);
    EXPECT_FLOAT_EQ(s.last_logprobs().logprob, static_cast<float>(ref[id]));
    ExpectTopMatchesBruteForce(s.last_logprobs(), logits, 4);
  }
  // Tempered and cut to the top 3: {0.69, 0.25, 0.06}; top-p 0.9 then keeps ids 0 and 1.
  EXPECT_EQ(seen, (std::set<int32_t>{0, 1}));
}

TEST(Sampler, NoLogprobsUnlessAsked) {
  Sampler s(SamplingOptions{}, 3);
  std::vector<float> l = {0.0f, 1.0f, 2.0f};
  EXPECT_FALSE(s.records_logprobs());
  EXPECT_EQ(s.Next(l, {}), 2);
  EXPECT_EQ(s.last_logprobs().id, -1);
  EXPECT_TRUE(s.last_logprobs().top.empty());
}

void ExpectInvalid(const SamplingOptions& o, const std::string& field, int64_t vocab = 0) {
  const Status st = o.Validate(vocab);
  ASSERT_FALSE(st.ok()) << field;
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find(field), std::string::npos) << st.message();
}

TEST(Sampler, ValidatesTheOpenAiOptions) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  SamplingOptions o;
  for (float v : {2.5f, -2.01f, nan}) {
    o = {};
    o.frequency_penalty = v;
    ExpectInvalid(o, "frequency_penalty");
    o = {};
    o.presence_penalty = v;
    ExpectInvalid(o, "presence_penalty");
  }
  for (int v : {-1, kMaxTopLogprobs + 1}) {
    o = {};
    o.top_logprobs = v;
    ExpectInvalid(o, "top_logprobs");
  }
  for (float b : {100.5f, -101.0f, nan}) {
    o = {};
    o.logit_bias = {{5, b}};
    ExpectInvalid(o, "logit_bias for token id 5");
  }
  o = {};
  o.logit_bias = {{-1, 1.0f}};
  ExpectInvalid(o, "logit_bias names token id -1");
  o.logit_bias = {{200029, 1.0f}};
  EXPECT_TRUE(o.Validate().ok());
  ExpectInvalid(o, "logit_bias names token id 200029", 200029);
  ExpectInvalid(o, "0..200028", 200029);
  o.logit_bias = {{3, 1.0f}, {7, 2.0f}, {3, -1.0f}};
  ExpectInvalid(o, "logit_bias lists token id 3 more than once");

  o = {};
  o.frequency_penalty = -2.0f;
  o.presence_penalty = 2.0f;
  o.top_logprobs = kMaxTopLogprobs;
  o.logprobs = true;
  o.logit_bias = {{0, -100.0f}, {200028, 100.0f}};
  EXPECT_TRUE(o.Validate(200029).ok()) << o.Validate(200029).ToString();
}

}  // namespace
}  // namespace phi4mm
