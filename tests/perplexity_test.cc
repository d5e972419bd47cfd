// runtime/perplexity.h on the tiny fixture: the windowed perplexity equals exp(mean NLL) computed
// independently (a Session fed one window at a time, log-softmax in double); a model scored
// against its own reference has KL ~0 (within the 16-bit code's resolution) and the same argmax
// everywhere; q4 against the f32 reference has a clearly positive KL; the reference file's
// 16-bit code round-trips log-probabilities within half a code step; a reference whose tokens
// differ from the text's is refused naming the first different position.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <numeric>

#include "phi4mm/runtime/perplexity.h"
#include "phi4mm/runtime/session.h"
#include "test_util.h"

namespace phi4mm {
namespace {

constexpr int64_t kCtx = 32;
constexpr int64_t kChunks = 2;

std::shared_ptr<const Model> LoadTiny(QuantMode q) {
  LoadOptions opts;
  opts.num_threads = 2;
  opts.quant = q;
  opts.kv_dtype = KvDType::kF32;
  auto m = Model::Load(test::FixturePath("tiny/orig"), opts);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? *m : nullptr;
}

std::vector<int32_t> TextIds(const Model& m) {
  const std::string text =
      "The quick brown fox jumps over the lazy dog near the river bank. A lighthouse keeper found that the old radio "
      "could talk to ships from the past; she wrote down every call in a notebook and, after a year, decided to "
      "answer one of them. def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n"
      "    return a\n";
  auto ids = m.tokenizer().Encode(text);
  EXPECT_TRUE(ids.ok());
  return ids.ok() ? *ids : std::vector<int32_t>{};
}

// NLL of token t under logits, in double.
double Nll(const std::vector<float>& logits, int32_t t) {
  double mx = logits[0];
  for (float v : logits) mx = std::max(mx, double{v});
  double s = 0;
  for (float v : logits) s += std::exp(double{v} - mx);
  return mx + std::log(s) - logits[t];
}

TEST(Perplexity, EqualsExpOfMeanNllOfTheSecondHalfOfEachWindow) {
  auto model = LoadTiny(QuantMode::kNone);
  ASSERT_NE(model, nullptr);
  const std::vector<int32_t> ids = TextIds(*model);
  ASSERT_GE(ids.size(), static_cast<size_t>(kCtx * kChunks));
  for (LoraMode mode : {LoraMode::kNone, LoraMode::kSpeech}) {
    PerplexityOptions opts;
    opts.context = kCtx;
    opts.max_chunks = kChunks;
    opts.mode = mode;
    auto r = EvaluatePerplexity(*model, ids, opts);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->chunks, kChunks);
    EXPECT_EQ(r->scored, kChunks * (kCtx - 1 - kCtx / 2));

    // Independently: a fresh session per window, appended one token at a time.
    double sum = 0;
    int64_t n = 0;
    for (int64_t c = 0; c < kChunks; ++c) {
      Session s(model);
      for (int64_t i = 0; i + 1 < kCtx; ++i) {
        const int32_t id = ids[c * kCtx + i];
        ASSERT_TRUE(s.Append(std::span(&id, 1), mode).ok());
        if (i >= kCtx / 2) {
          sum += Nll(s.logits(), ids[c * kCtx + i + 1]);
          ++n;
        }
      }
    }
    ASSERT_EQ(n, r->scored);
    EXPECT_NEAR(r->nll.mean, sum / n, 1e-4 * sum / n) << LoraModeName(mode);
    EXPECT_NEAR(r->ppl, std::exp(sum / n), 1e-4 * std::exp(sum / n));
    EXPECT_GT(r->nll.stderr_, 0);
    EXPECT_FALSE(r->kl.has_value());
  }
}

TEST(Perplexity, ModelAgainstItsOwnReferenceHasZeroKlAndTheSameArgmax) {
  auto model = LoadTiny(QuantMode::kNone);
  ASSERT_NE(model, nullptr);
  const std::vector<int32_t> ids = TextIds(*model);
  const std::string dir = test::TempDir("perplexity_self");
  PerplexityOptions opts;
  opts.context = kCtx;
  opts.max_chunks = kChunks;
  opts.save_path = dir + "/ref.bin";
  auto base = EvaluatePerplexity(*model, ids, opts);
  ASSERT_TRUE(base.ok()) << base.status().ToString();
  EXPECT_EQ(static_cast<int64_t>(std::filesystem::file_size(opts.save_path)),
            20 + 4 * kCtx * kChunks + 2 * base->scored * LogProbRowWidth(model->decoder().config().vocab_size));

  opts.save_path.clear();
  opts.reference_path = dir + "/ref.bin";
  auto self = EvaluatePerplexity(*model, ids, opts);
  ASSERT_TRUE(self.ok()) << self.status().ToString();
  ASSERT_TRUE(self->kl.has_value());
  EXPECT_EQ(self->scored, base->scored);
  EXPECT_NEAR(self->nll.mean, base->nll.mean, 1e-6 * base->nll.mean);  // float vs double NLL sums
  // The reference stores log-probabilities in steps of (16 nats / 65535), so its own PPL and the
  // KL are exact up to half a step: 1.2e-4 nats per token.
  const double half_step = 0.5 * 16.0 / 65535;
  EXPECT_NEAR(std::log(self->kl->ppl_base), base->nll.mean, half_step);
  EXPECT_LT(std::abs(self->kl->kld.mean), half_step);
  EXPECT_LT(self->kl->kld_max, 2 * half_step);
  EXPECT_DOUBLE_EQ(self->kl->same_top.mean, 1.0);

  // q4 against the f32 reference: a real divergence, and fewer argmaxes kept.
  auto q4 = LoadTiny(QuantMode::kQ4);
  ASSERT_NE(q4, nullptr);
  auto r4 = EvaluatePerplexity(*q4, ids, opts);
  ASSERT_TRUE(r4.ok()) << r4.status().ToString();
  EXPECT_GT(r4->kl->kld.mean, 10 * half_step);
  EXPECT_GE(r4->kl->kld_p99, r4->kl->kld_median);
  EXPECT_GE(r4->kl->kld_max, r4->kl->kld_p99);
  EXPECT_LT(r4->kl->same_top.mean, 1.0);
  EXPECT_DOUBLE_EQ(r4->kl->ppl_base, self->kl->ppl_base);
  std::filesystem::remove_all(dir);
}

TEST(Perplexity, ReferenceCodeRoundTripsLogProbabilitiesWithinHalfAStep) {
  const int64_t V = 7;
  const std::vector<float> logits = {1.0f, -3.5f, 4.25f, 4.25f, -20.0f, 0.0f, 2.0f};
  std::vector<uint16_t> row(LogProbRowWidth(V));
  EXPECT_EQ(row.size(), 12u);
  const double nll = EncodeLogProbs(logits.data(), V, 6, row.data());
  EXPECT_NEAR(nll, Nll(logits, 6), 1e-6);
  float scale, min_lp;
  std::memcpy(&scale, row.data(), 4);
  std::memcpy(&min_lp, row.data() + 2, 4);
  EXPECT_FLOAT_EQ(scale, 16.0f / 65535);
  for (int64_t i = 0; i < V; ++i) {
    const double want = -Nll(logits, static_cast<int32_t>(i));
    const double got = scale * row[4 + i] + min_lp;
    if (logits[i] > 4.25f - 16) EXPECT_NEAR(got, want, 0.51 * scale) << i;
    else EXPECT_EQ(row[4 + i], 0) << i;  // more than 16 nats below the top: dropped from the KL sum
  }
  // Scored against its own code: KL within half a step, same argmax (the first of the tie).
  ScoreSums s;
  EXPECT_LT(std::abs(s.AddWithReference(logits.data(), V, 2, row.data())), 0.51 * scale);
  EXPECT_EQ(s.same_top, 1);
}

TEST(Perplexity, PercentileAndMeanMatchLlamaPerplexityDefinitions) {
  const std::vector<float> v = {5, 1, 4, 2, 3};
  EXPECT_DOUBLE_EQ(Percentile(v, 0.5), 3.0);
  EXPECT_DOUBLE_EQ(Percentile(v, 0.99), 4.96);  // 0.99 * 4 = 3.96: between the 4th and 5th value
  EXPECT_DOUBLE_EQ(Percentile(v, 1.0), 5.0);
  const MeanError few = MeanAndError(15, 55, 5);
  EXPECT_DOUBLE_EQ(few.mean, 3.0);
  EXPECT_EQ(few.stderr_, 0);  // no error below 11 values
  std::vector<double> x(20);
  std::iota(x.begin(), x.end(), 1.0);
  double s = 0, s2 = 0;
  for (double e : x) s += e, s2 += e * e;
  const MeanError m = MeanAndError(s, s2, 20);
  EXPECT_DOUBLE_EQ(m.mean, 10.5);
  EXPECT_NEAR(m.stderr_, std::sqrt((s2 / 20 - 10.5 * 10.5) / 19), 1e-12);
}

TEST(Perplexity, RefusesAReferenceOfOtherTokensOrContext) {
  auto model = LoadTiny(QuantMode::kNone);
  ASSERT_NE(model, nullptr);
  std::vector<int32_t> ids = TextIds(*model);
  const std::string dir = test::TempDir("perplexity_refuse");
  PerplexityOptions opts;
  opts.context = kCtx;
  opts.max_chunks = 1;
  opts.save_path = dir + "/ref.bin";
  ASSERT_TRUE(EvaluatePerplexity(*model, ids, opts).ok());
  opts.save_path.clear();
  opts.reference_path = dir + "/ref.bin";
  ids[5] = ids[5] == 100 ? 101 : 100;
  auto r = EvaluatePerplexity(*model, ids, opts);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("position 5"), std::string::npos) << r.status().ToString();
  opts.context = 2 * kCtx;
  r = EvaluatePerplexity(*model, {}, opts);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--ctx"), std::string::npos) << r.status().ToString();
  opts.reference_path = dir + "/missing.bin";
  EXPECT_EQ(EvaluatePerplexity(*model, {}, opts).status().code(), StatusCode::kNotFound);
  opts.reference_path.clear();
  opts.context = 7;
  EXPECT_FALSE(EvaluatePerplexity(*model, ids, opts).ok());
  opts.context = 4096;
  EXPECT_FALSE(EvaluatePerplexity(*model, ids, opts).ok());  // fewer tokens than one window
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace phi4mm
