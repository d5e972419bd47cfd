// LoraLinear on its own, with Q4_K weights at the real adapters' ranks: the segmented Forward of a
// batch mixing modes gives every row what it gives that row alone (to 1e-5 of the scale; bit for
// bit with and without a pool) and what the float product of the dequantized weights gives, up to
// the int8 activations.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "phi4mm/base/thread_pool.h"
#include "phi4mm/kernels/weight_matrix.h"
#include "phi4mm/models/lora_linear.h"
#include "test_util.h"

namespace phi4mm {
namespace {

WeightMatrix RandomQ4K(int64_t rows, int64_t cols, uint32_t seed, float sigma = 1.0f) {
  auto w = WeightMatrix::FromF32(test::Gaussian(static_cast<size_t>(rows * cols), seed, sigma), rows, cols)
               .Quantize(WeightFormat::kQ4K);
  EXPECT_TRUE(w.ok());
  auto k = w->ForKernels(ActiveKernels());
  EXPECT_TRUE(k.ok());
  return *k;
}

LoraAdapter RandomAdapter(int64_t out, int64_t in, int64_t rank, uint32_t seed) {
  LoraAdapter ad;
  ad.a = RandomQ4K(rank, in, seed, 0.05f);
  ad.b = RandomQ4K(out, rank, seed + 1, 0.05f);
  ad.scale = 2.0f;
  return ad;
}

TEST(LoraLinear, SegmentsGiveEachRowItsOwnResult) {
  const int64_t in = 512, out = 301, n = 7;
  // The real adapters' ranks: 256 (whole Q4_K blocks) and 320 (a block and a quarter).
  const LoraAdapter vision = RandomAdapter(out, in, 256, 11), speech = RandomAdapter(out, in, 320, 13);
  const LoraLinear lin(RandomQ4K(out, in, 17, 0.05f), vision, speech);
  // Rows: text, vision x2, speech x3, text.
  const LoraSegment segments[] = {{1, 3, LoraMode::kVision}, {3, 6, LoraMode::kSpeech}};
  const LoraMode mode_of[n] = {LoraMode::kNone,   LoraMode::kVision, LoraMode::kVision, LoraMode::kSpeech,
                               LoraMode::kSpeech, LoraMode::kSpeech, LoraMode::kNone};
  const std::vector<float> x = test::Gaussian(static_cast<size_t>(n * in), 19);
  ThreadPool pool(2);
  std::vector<float> scratch, batched(static_cast<size_t>(n * out)), serial(batched.size());
  lin.Forward(x.data(), n, batched.data(), segments, &pool, &scratch);
  lin.Forward(x.data(), n, serial.data(), segments, nullptr, &scratch);
  EXPECT_EQ(batched, serial);

  std::vector<float> w_row(in), a_row(in), b_row(320);
  for (int64_t i = 0; i < n; ++i) {
    SCOPED_TRACE("row " + std::to_string(i));
    std::vector<float> alone(static_cast<size_t>(out));
    lin.Forward(x.data() + i * in, 1, alone.data(), mode_of[i], &pool, &scratch);
    // The bound for a row in a batch against the row alone: 1e-5 of the scale. (Equal bit
    // for bit on every table but AVX2, whose Q4_K batch and GEMV tiles differ by an ulp.)
    const std::vector<float> in_batch(batched.begin() + i * out, batched.begin() + (i + 1) * out);
    EXPECT_LE(test::MaxAbsDiff(in_batch, alone), 1e-5 * test::MaxAbs(alone));

    // The float product of the dequantized weights: W x + scale · B (A x).
    const LoraAdapter* ad = lin.adapter(mode_of[i]);
    std::vector<double> t;
    if (ad != nullptr) {
      for (int64_t k = 0; k < ad->a.rows(); ++k) {
        ad->a.Row(k, a_row.data());
        double s = 0;
        for (int64_t j = 0; j < in; ++j) s += a_row[j] * x[i * in + j];
        t.push_back(s * ad->scale);
      }
    }
    std::vector<float> want(static_cast<size_t>(out));
    for (int64_t o = 0; o < out; ++o) {
      lin.base().Row(o, w_row.data());
      double s = 0;
      for (int64_t j = 0; j < in; ++j) s += w_row[j] * x[i * in + j];
      if (ad != nullptr) ad->b.Row(o, b_row.data());
      for (size_t k = 0; k < t.size(); ++k) s += b_row[k] * t[k];
      want[o] = static_cast<float>(s);
    }
    // The int8 activations (per-block absmax / 127, ~3 sigma over 256 Gaussian values) err by
    // ~0.7% of an output's sigma per product, and the base and low-rank products both do: ~2% of
    // the row's largest output at the worst of 301. A wrong row, segment or stride errs by 100%.
    EXPECT_LE(test::MaxAbsDiff(alone, want), 0.02 * test::MaxAbs(want));
  }
}

}  // namespace
}  // namespace phi4mm
