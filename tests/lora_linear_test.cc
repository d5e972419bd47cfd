// LoraLinear on its own: the packed Q4_K tail of B (LoraAdapter::b_tail) holds the values the
// padded rows held, and the fused segmented Forward gives every row what it gives that row alone
// (to 1e-5 of the scale; bit for bit with and without a pool) and what the float product of the
// dequantized weights gives, up to the int8 activations.
#include <gtest/gtest.h>

#include <algorithm>
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

// B's values as the adapter holds them: the leading columns from b, the tail from its packed row.
std::vector<float> DequantizedB(const LoraAdapter& ad, int64_t out, int64_t rank) {
  std::vector<float> v(static_cast<size_t>(out * rank)), row(static_cast<size_t>(std::max<int64_t>(rank, 256)));
  const int64_t lead = rank - ad.tail;
  for (int64_t o = 0; o < out; ++o) {
    if (lead > 0) {
      ad.b.Row(o, row.data());
      std::copy(row.begin(), row.begin() + lead, v.begin() + o * rank);
    }
    if (ad.tail > 0) {
      ad.b_tail.Row(o / ad.pack, row.data());
      const auto* t = row.data() + (o % ad.pack) * ad.tail;
      std::copy(t, t + ad.tail, v.begin() + o * rank + lead);
    }
  }
  return v;
}

TEST(LoraLinear, PacksTheQ4KTailOfBWithTheValuesOfThePaddedRows) {
  struct Case {
    int64_t out, rank, tail, pack;
  };
  // 320 = 256 + 64 (the real speech adapter); 6 (a rank under a block, the trained fixture's);
  // 256 and 400 (no tail, and one over half a block) stay as they are.
  for (const Case c : {Case{37, 320, 64, 4}, Case{50, 6, 6, 42}, Case{9, 256, 0, 1}, Case{9, 400, 0, 1}}) {
    SCOPED_TRACE("rank " + std::to_string(c.rank));
    const LoraAdapter padded = RandomAdapter(c.out, 512, c.rank, 7);
    LoraAdapter ad = padded;
    ASSERT_TRUE(PackQ4KTail(&ad).ok());
    EXPECT_EQ(ad.tail, c.tail);
    EXPECT_EQ(ad.pack, c.pack);
    if (c.tail == 0) {
      EXPECT_EQ(ad.b.data(), padded.b.data());
      EXPECT_TRUE(ad.b_tail.empty());
      continue;
    }
    EXPECT_EQ(ad.b.cols(), c.rank - c.tail);
    EXPECT_EQ(ad.b_tail.rows(), (c.out + c.pack - 1) / c.pack);
    EXPECT_EQ(ad.b_tail.cols(), 256);
    EXPECT_LT(ad.bytes(), padded.a.bytes() + padded.b.bytes());
    // Packing again finds nothing to pack.
    LoraAdapter again = ad;
    ASSERT_TRUE(PackQ4KTail(&again).ok());
    EXPECT_EQ(again.b_tail.data(), ad.b_tail.data());

    const std::vector<float> got = DequantizedB(ad, c.out, c.rank);
    // The packed rows as PackQ4KTail builds them, from the padded rows' values.
    const int64_t lead = c.rank - c.tail;
    std::vector<float> packed(static_cast<size_t>(ad.b_tail.rows() * 256), 0.0f), row(static_cast<size_t>(c.rank));
    for (int64_t o = 0; o < c.out; ++o) {
      padded.b.Row(o, row.data());
      // The whole blocks are the same bytes.
      for (int64_t j = 0; j < lead; ++j) ASSERT_EQ(got[o * c.rank + j], row[j]) << o << "," << j;
      std::copy(row.begin() + lead, row.end(), packed.begin() + (o / c.pack) * 256 + (o % c.pack) * c.tail);
    }
    // The tail is re-quantized: each value within one 4-bit step of its 32-value sub-block (range /
    // 15), plus what rounding the sub-block's scale and offset to 6 bits of the block's largest
    // costs (range / 63).
    for (int64_t o = 0; o < c.out; ++o)
      for (int64_t j = lead; j < c.rank; ++j) {
        const int64_t p = (o / c.pack) * 256 + (o % c.pack) * c.tail + (j - lead);
        auto sub_range = [&](int64_t begin, int64_t len) {
          const auto [lo, hi] = std::minmax_element(packed.begin() + begin, packed.begin() + begin + len);
          return static_cast<double>(*hi - *lo);
        };
        const double bound = sub_range(p / 32 * 32, 32) / 15 + sub_range(p / 256 * 256, 256) / 63;
        EXPECT_LE(std::abs(got[o * c.rank + j] - packed[p]), bound) << o << "," << j;
      }
  }
}

TEST(LoraLinear, FusedSegmentsGiveEachRowItsOwnResult) {
  const int64_t in = 512, out = 301, n = 7;
  LoraAdapter vision = RandomAdapter(out, in, 256, 11), speech = RandomAdapter(out, in, 320, 13);
  ASSERT_TRUE(PackQ4KTail(&speech).ok());
  ASSERT_EQ(speech.pack, 4);
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

  const std::vector<float> b_vision = DequantizedB(vision, out, 256), b_speech = DequantizedB(speech, out, 320);
  std::vector<float> w_row(in), a_row(in);
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
    const std::vector<float>& bq = mode_of[i] == LoraMode::kVision ? b_vision : b_speech;
    std::vector<float> want(static_cast<size_t>(out));
    for (int64_t o = 0; o < out; ++o) {
      lin.base().Row(o, w_row.data());
      double s = 0;
      for (int64_t j = 0; j < in; ++j) s += w_row[j] * x[i * in + j];
      for (size_t k = 0; k < t.size(); ++k) s += bq[o * static_cast<int64_t>(t.size()) + k] * t[k];
      want[o] = static_cast<float>(s);
    }
    // The int8 activations (per-block absmax / 127, ~3 sigma over 256 Gaussian values) err by
    // ~0.7% of an output's sigma per product, and the base and low-rank products both do: ~2% of
    // the row's largest output at the worst of 301. A wrong row, slot or stride errs by 100%.
    EXPECT_LE(test::MaxAbsDiff(alone, want), 0.02 * test::MaxAbs(want));
  }
}

}  // namespace
}  // namespace phi4mm
