// Block formats and matmul kernels: quantize -> dequantize error within the analytic bound of each
// format (Q8_0: half a step of the stored scale; Q4_K: the nearest level of the stored grid, and
// its step search beating min/max rounding), activation quantizers bit-identical across ISAs, the
// scalar kernels against a double-precision reference with the analytic activation-rounding bound,
// and every kernel table this CPU runs against the scalar table, for every format, on odd shapes
// and column tails (rows 1..130, cols 32..4304, n = 1..17: GEMV, the batch tiles, GEMM), with accumulate and threads. Q4_K
// also: the interleaved block order spelled out, and the int16 accumulation bound hit exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "phi4mm/base/half.h"
#include "phi4mm/kernels/quant.h"
#include "phi4mm/kernels/weight_matrix.h"
#include "test_util.h"

namespace phi4mm {
namespace {

const int64_t kCols[] = {1, 31, 32, 48, 64, 96, 300, 4304};

TEST(QuantFormat, Q8RoundTripWithinHalfStep) {
  for (int64_t cols : kCols) {
    const std::vector<float> x =
        test::GaussianWithOutliers(static_cast<size_t>(cols), static_cast<uint32_t>(cols), 0.05f);
    std::vector<BlockQ8_0> q(static_cast<size_t>(CeilDiv(cols, kQ8Block)));
    QuantizeRowQ8_0(x.data(), cols, q.data());
    std::vector<float> back(static_cast<size_t>(cols));
    DequantizeRowQ8_0(q.data(), cols, back.data());
    for (int64_t i = 0; i < cols; ++i) {
      const float d = F16ToF32(q[i / kQ8Block].d);
      const float bound = 0.5f * d * (1.0f + 1e-6f) + 1e-30f;
      ASSERT_LE(std::fabs(back[i] - x[i]), bound) << "cols=" << cols << " i=" << i;
    }
  }
}

// The distance from x to the nearest of the 16 values sub-block j of block b can hold.
float NearestQ4KLevelDistance(const BlockQ4K& b, int j, float x) {
  const float step = F16ToF32(b.d) * static_cast<float>(b.scales[j]);
  const float offset = F16ToF32(b.dmin) * static_cast<float>(b.mins[j]);
  float best = INFINITY;
  for (int q = 0; q < 16; ++q) best = std::min(best, std::fabs(step * static_cast<float>(q) - offset - x));
  return best;
}

// Q4_K may clip (its step and offset are searched, not min/max), but every weight must get the
// level of its sub-block nearest to it: within float rounding of the nearest level's distance.
TEST(QuantFormat, Q4KEveryWeightGetsItsNearestLevel) {
  for (int64_t cols : kCols) {
    std::vector<float> x =
        test::GaussianWithOutliers(static_cast<size_t>(cols), static_cast<uint32_t>(cols) + 5, 0.05f);
    if (cols >= 64)
      for (int i = 32; i < 64; ++i) x[i] = 0.01f + 0.001f * static_cast<float>(i);  // an all-positive sub-block
    std::vector<BlockQ4K> q(static_cast<size_t>(CeilDiv(cols, kQ4KBlock)));
    QuantizeRowQ4K(x.data(), cols, q.data());
    std::vector<float> back(static_cast<size_t>(cols));
    DequantizeRowQ4K(q.data(), cols, back.data());
    for (int64_t i = 0; i < cols; ++i) {
      const BlockQ4K& b = q[i / kQ4KBlock];
      const float nearest = NearestQ4KLevelDistance(b, static_cast<int>(i % kQ4KBlock) / kQ4KSub, x[i]);
      ASSERT_LE(std::fabs(back[i] - x[i]), nearest * (1.0f + 1e-5f) + 1e-6f * std::fabs(x[i]) + 1e-30f)
          << "cols=" << cols << " i=" << i;
    }
  }
}

// The step/offset search is there to beat plain min/max rounding: over many rows of weights with
// outliers, its squared error (the quantizer's objective) must be below that of min/max rounding
// even with unrounded f32 steps and offsets.
TEST(QuantFormat, Q4KSearchBeatsMinMaxRounding) {
  const int64_t cols = 3072, rows = 64;
  double err = 0, err_minmax = 0;
  std::vector<BlockQ4K> q(static_cast<size_t>(CeilDiv(cols, kQ4KBlock)));
  std::vector<float> back(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<float> x =
        test::GaussianWithOutliers(static_cast<size_t>(cols), static_cast<uint32_t>(r) + 101, 0.02f);
    QuantizeRowQ4K(x.data(), cols, q.data());
    DequantizeRowQ4K(q.data(), cols, back.data());
    for (int64_t s = 0; s < cols; s += kQ4KSub) {
      float lo = 0.0f, hi = x[s];
      for (int i = 0; i < kQ4KSub; ++i) {
        lo = std::min(lo, x[s + i]);
        hi = std::max(hi, x[s + i]);
      }
      const float step = (hi - lo) / 15.0f;
      for (int i = 0; i < kQ4KSub; ++i) {
        const float v = x[s + i];
        const float level = std::clamp(std::nearbyint((v - lo) / step), 0.0f, 15.0f);
        const double e = back[s + i] - v, e_minmax = step * level + lo - v;
        err += e * e;
        err_minmax += e_minmax * e_minmax;
      }
    }
  }
  std::printf("Q4_K squared error, search / min-max rounding: %.3f\n", err / err_minmax);
  EXPECT_LT(err, err_minmax);
}

// The interleaved Q4_K / A8K block order, spelled out independently of Q4KPos: weight k of
// sub-block j of a block is the nibble at position (k/4)*32 + j*4 + k%4, position p living in
// byte (p/64)*32 + p%32 (low nibble when p%64 < 32). Dequantizing puts weight k back at k, at its
// nearest level, and the activation quantizer stores element k at the same position.
TEST(QuantFormat, Q4KInterleavedOrderRoundTrips) {
  for (int64_t cols : {48, 256, 300, 4304}) {
    const std::vector<float> x =
        test::GaussianWithOutliers(static_cast<size_t>(cols), static_cast<uint32_t>(cols) + 17, 0.05f);
    std::vector<BlockQ4K> q(static_cast<size_t>(CeilDiv(cols, kQ4KBlock)));
    QuantizeRowQ4K(x.data(), cols, q.data());
    std::vector<float> back(static_cast<size_t>(cols));
    DequantizeRowQ4K(q.data(), cols, back.data());
    std::vector<BlockA8K> a(q.size());
    QuantizeRowA8K(x.data(), cols, a.data());
    for (int64_t e = 0; e < cols; ++e) {
      const BlockQ4K& b = q[e / kQ4KBlock];
      const int j = static_cast<int>(e % kQ4KBlock) / 32, k = static_cast<int>(e % 32);
      const int p = (k / 4) * 32 + j * 4 + k % 4;
      ASSERT_EQ(p, Q4KPos(j, k));
      const uint8_t byte = b.qs[(p / 64) * 32 + p % 32];
      const int nib = p % 64 < 32 ? (byte & 15) : (byte >> 4);
      const float step = F16ToF32(b.d) * static_cast<float>(b.scales[j]);
      const float want = step * static_cast<float>(nib) - F16ToF32(b.dmin) * static_cast<float>(b.mins[j]);
      ASSERT_EQ(back[e], want) << "cols=" << cols << " e=" << e;
      const float bound = NearestQ4KLevelDistance(b, j, x[e]) * (1.0f + 1e-5f) + 1e-6f * std::fabs(x[e]) + 1e-30f;
      ASSERT_LE(std::fabs(back[e] - x[e]), bound) << "cols=" << cols << " e=" << e;
      const BlockA8K& ab = a[e / kQ4KBlock];
      const float id = ab.d > 0.0f ? 1.0f / ab.d : 0.0f;
      ASSERT_NEAR(ab.qs[p], x[e] * id, 0.5f + 1e-3f) << "A8K cols=" << cols << " e=" << e;
    }
  }
}

TEST(QuantFormat, ZeroRowsStayZero) {
  std::vector<float> x(300, 0.0f), back(300, 1.0f);
  std::vector<BlockQ4K> q4(2);
  QuantizeRowQ4K(x.data(), 300, q4.data());
  DequantizeRowQ4K(q4.data(), 300, back.data());
  for (float v : back) ASSERT_EQ(v, 0.0f);
  std::vector<BlockQ8_0> q8(10);
  QuantizeRowQ8_0(x.data(), 300, q8.data());
  DequantizeRowQ8_0(q8.data(), 300, back.data());
  for (float v : back) ASSERT_EQ(v, 0.0f);
}

TEST(QuantActivations, EveryIsaMatchesScalarBitForBit) {
  for (const MatMulKernels* k : AvailableKernels()) {
    for (int64_t cols : kCols) {
      const std::vector<float> x =
          test::GaussianWithOutliers(static_cast<size_t>(cols), static_cast<uint32_t>(cols) * 3, 2.0f);
      std::vector<uint8_t> want(A8RowBytes(cols)), got(A8RowBytes(cols));
      QuantizeRowA8(x.data(), cols, reinterpret_cast<BlockA8*>(want.data()));
      k->quantize_a8(x.data(), cols, got.data());
      EXPECT_EQ(want, got) << k->name << " A8 cols=" << cols;
      std::vector<uint8_t> want_k(A8KRowBytes(cols)), got_k(A8KRowBytes(cols));
      QuantizeRowA8K(x.data(), cols, reinterpret_cast<BlockA8K*>(want_k.data()));
      k->quantize_a8k(x.data(), cols, got_k.data());
      EXPECT_EQ(want_k, got_k) << k->name << " A8K cols=" << cols;
    }
  }
}

const WeightFormat kFormats[] = {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kF16, WeightFormat::kQ8_0,
                                 WeightFormat::kQ4K};

WeightMatrix Make(int64_t rows, int64_t cols, WeightFormat f, uint32_t seed) {
  auto w = WeightMatrix::FromF32(test::GaussianWithOutliers(static_cast<size_t>(rows * cols), seed, 0.05f), rows, cols)
               .Quantize(f);
  EXPECT_TRUE(w.ok());
  return *w;
}

// The scalar table against double precision: exact for the float formats up to rounding, and
// within the activation-rounding bound sum_k |w_k| * (block amax / 254) for the block formats.
TEST(QuantKernels, ScalarMatchesDoubleReference) {
  for (WeightFormat f : kFormats) {
    for (int64_t cols : kCols) {
      const int64_t rows = 7, n = 3;
      const WeightMatrix w = Make(rows, cols, f, static_cast<uint32_t>(cols) + 11);
      const std::vector<float> x = test::GaussianWithOutliers(static_cast<size_t>(n * cols), 99, 1.0f);
      std::vector<float> y(static_cast<size_t>(n * rows));
      w.MatMulWith(ScalarKernels(), x.data(), n, y.data(), nullptr);
      const int block = f == WeightFormat::kQ4K ? kQ4KBlock : kQ8Block;
      std::vector<float> wr(static_cast<size_t>(cols));
      for (int64_t r = 0; r < rows; ++r) {
        w.Row(r, wr.data());
        for (int64_t i = 0; i < n; ++i) {
          const float* xi = x.data() + i * cols;
          double ref = 0, mag = 0, bound = 0;
          for (int64_t b = 0; b * block < cols; ++b) {
            double amax = 0;
            for (int64_t k = b * block; k < std::min(cols, (b + 1) * block); ++k) amax = std::max(amax, std::fabs(double{xi[k]}));
            for (int64_t k = b * block; k < std::min(cols, (b + 1) * block); ++k) {
              ref += double{wr[k]} * xi[k];
              mag += std::fabs(double{wr[k]} * xi[k]);
              if (IsBlockFormat(f)) bound += std::fabs(double{wr[k]}) * amax / 254.0;
            }
          }
          bound += 1e-5 * mag + 1e-6;
          EXPECT_NEAR(y[i * rows + r], ref, bound) << WeightFormatName(f) << " cols=" << cols << " r=" << r << " i=" << i;
        }
      }
    }
  }
}

// Every table against the scalar one on the same quantized weights. The scalar result and each
// element's tolerance are computed once per case and checked against every table.
TEST(QuantKernels, EveryIsaMatchesScalar) {
  ThreadPool pool(3);
  const std::vector<const MatMulKernels*> tables = AvailableKernels();
  for (WeightFormat f : kFormats) {
    for (int64_t rows : {1, 3, 7, 33, 130}) {
      for (int64_t cols : {32, 48, 64, 96, 300, 4304}) {
        if (cols == 4304 && rows > 33) continue;
        const WeightMatrix w = Make(rows, cols, f, static_cast<uint32_t>(rows * 7 + cols));
        // Each table's tile reads its own layout, as the model loaders give it (ForKernels).
        std::vector<WeightMatrix> wk;
        for (const MatMulKernels* k : tables) {
          wk.push_back(*w.ForKernels(*k));
          ASSERT_EQ(wk.back().layout(), k->layout[static_cast<int>(f)]);
        }
        // Summation order differs between tables; Q4_K also subtracts a min term, so the scale
        // includes the row's largest weight.
        std::vector<float> wr(static_cast<size_t>(rows * cols));
        std::vector<double> wmax(static_cast<size_t>(rows));
        for (int64_t r = 0; r < rows; ++r) {
          w.Row(r, wr.data() + r * cols);
          for (int64_t c = 0; c < cols; ++c) wmax[r] = std::max(wmax[r], std::fabs(double{wr[r * cols + c]}));
        }
        for (int64_t n : {1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 17}) {
          const std::vector<float> x =
              test::GaussianWithOutliers(static_cast<size_t>(n * cols), static_cast<uint32_t>(n + cols), 1.0f);
          std::vector<float> want(static_cast<size_t>(n * rows));
          w.MatMulWith(ScalarKernels(), x.data(), n, want.data(), nullptr);
          std::vector<double> tol(want.size());
          for (int64_t r = 0; r < rows; ++r) {
            for (int64_t i = 0; i < n; ++i) {
              double mag = 0;
              for (int64_t c = 0; c < cols; ++c)
                mag += (std::fabs(double{wr[r * cols + c]}) + wmax[r]) * std::fabs(x[i * cols + c]);
              tol[static_cast<size_t>(i * rows + r)] = 1e-5 * mag + 1e-6;
            }
          }
          for (size_t t = 0; t < tables.size(); ++t) {
            const MatMulKernels& k = *tables[t];
            std::vector<float> got(want.size(), 0.5f), acc(want.size(), 0.5f);
            wk[t].MatMulWith(k, x.data(), n, got.data(), n % 2 ? &pool : nullptr);
            wk[t].MatMulWith(k, x.data(), n, acc.data(), &pool, /*accumulate=*/true);
            for (size_t at = 0; at < want.size(); ++at) {
              ASSERT_NEAR(got[at], want[at], tol[at])
                  << k.name << " " << WeightFormatName(f) << " rows=" << rows << " cols=" << cols << " n=" << n
                  << " r=" << at % rows << " i=" << at / rows;
              ASSERT_NEAR(acc[at], want[at] + 0.5f, tol[at] + 1e-6) << k.name << " accumulate";
            }
          }
        }
      }
    }
  }
}

// Q4_K at the int16 accumulation bound of the AVX2 tile: every nibble 15 against activations of
// +-127 (8 maddubs pairs of 2 * 15 * 127 = 30480 per int16 lane), and every table exactly equal to
// the scalar one (the sums are exact integers and small enough for exact float scaling).
TEST(QuantKernels, Q4KExtremesAreExact) {
  for (int64_t cols : {256, 300, 1024}) {
    const int64_t rows = 5, nb = CeilDiv(cols, kQ4KBlock);
    std::vector<BlockQ4K> blocks(static_cast<size_t>(rows * nb));
    for (BlockQ4K& b : blocks) {
      b.d = F32ToF16(1.0f);
      b.dmin = F32ToF16(0.5f);
      for (int j = 0; j < 8; ++j) {
        b.scales[j] = 1;
        b.mins[j] = static_cast<uint8_t>(j);
      }
      std::memset(b.qs, 0xFF, sizeof(b.qs));
    }
    auto w = WeightMatrix::FromStorage(WeightFormat::kQ4K, blocks.data(), blocks.size() * sizeof(BlockQ4K), rows, cols);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    for (float sign : {1.0f, -1.0f}) {
      const int64_t n = 3;
      const std::vector<float> x(static_cast<size_t>(n * cols), sign * 127.0f);
      std::vector<float> want(static_cast<size_t>(n * rows));
      w->MatMulWith(ScalarKernels(), x.data(), n, want.data(), nullptr);
      // Each full block gives 256 * 15 * 127 * da - 0.5 * 32 * sum(mins) * 127 * da with da = 1.
      const float full = sign * (256.0f * 15.0f * 127.0f - 0.5f * 32.0f * 28.0f * 127.0f);
      if (cols % kQ4KBlock == 0) {
        EXPECT_EQ(want[0], full * static_cast<float>(nb));
      }
      for (const MatMulKernels* k : AvailableKernels()) {
        std::vector<float> got(want.size());
        w->MatMulWith(*k, x.data(), n, got.data(), nullptr);
        EXPECT_EQ(got, want) << k->name << " cols=" << cols << " sign=" << sign;
      }
    }
  }
}

// Q8_0 at the extremes of the eight-block groups' sign trick (weights stored q + 128, a start of
// -128 * sum(a)): weights and activations of +-127 in every sign pattern, every table exactly equal
// to the scalar one (exact integer sums, below 2^24 in every partial sum).
TEST(QuantKernels, Q8ExtremesAreExact) {
  for (int64_t cols : {32, 256, 300, 512}) {
    const int64_t rows = 5, n = 3;
    std::vector<float> wv(static_cast<size_t>(rows * cols)), x(static_cast<size_t>(n * cols));
    for (size_t i = 0; i < wv.size(); ++i) wv[i] = (i / 3) % 2 ? 127.0f : -127.0f;
    for (size_t i = 0; i < x.size(); ++i) x[i] = (i / 5) % 3 ? -127.0f : 127.0f;
    const WeightMatrix w = *WeightMatrix::FromF32(wv, rows, cols).Quantize(WeightFormat::kQ8_0);
    std::vector<float> want(static_cast<size_t>(n * rows));
    w.MatMulWith(ScalarKernels(), x.data(), n, want.data(), nullptr);
    std::vector<float> w0(static_cast<size_t>(cols));
    w.Row(0, w0.data());
    double ref = 0;
    for (int64_t c = 0; c < cols; ++c) ref += double{w0[c]} * x[c];
    EXPECT_EQ(want[0], static_cast<float>(ref)) << "cols=" << cols;
    for (const MatMulKernels* k : AvailableKernels()) {
      const WeightMatrix wk = *w.ForKernels(*k);
      for (int64_t m : {int64_t{1}, n}) {
        std::vector<float> got(static_cast<size_t>(m * rows));
        wk.MatMulWith(*k, x.data(), m, got.data(), nullptr);
        EXPECT_EQ(got, std::vector<float>(want.begin(), want.begin() + m * rows))
            << k->name << " cols=" << cols << " n=" << m;
      }
    }
  }
}

// The eight-block Q8_0 groups (WeightLayout::kQ8Groups): the same values as the plain rows on odd
// column counts (narrow last groups), a round trip back to the file's bytes, the same size, and a table's product on a
// matrix in another layout (repacked per call) equal to the product on its own layout.
TEST(QuantKernels, Q8GroupsLayoutKeepsEveryValue) {
  ThreadPool pool(2);
  for (int64_t cols : {1, 31, 32, 48, 255, 256, 300, 1152, 4304}) {
    const int64_t rows = 9;
    const WeightMatrix w = Make(rows, cols, WeightFormat::kQ8_0, static_cast<uint32_t>(cols));
    auto g = w.WithLayout(WeightLayout::kQ8Groups, &pool);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    EXPECT_EQ(g->layout(), WeightLayout::kQ8Groups);
    EXPECT_EQ(g->row_bytes(), w.row_bytes());  // the groups take the plain rows' bytes
    std::vector<float> a(static_cast<size_t>(cols)), b(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      w.Row(r, a.data());
      g->Row(r, b.data());
      ASSERT_EQ(a, b) << "cols=" << cols << " r=" << r;
    }
    auto back = g->WithLayout(WeightLayout::kRows);
    ASSERT_TRUE(back.ok());
    ASSERT_EQ(back->bytes(), w.bytes());
    EXPECT_EQ(std::memcmp(back->data(), w.data(), w.bytes()), 0) << "cols=" << cols;
    // A view of the grouped bytes is the same matrix; a wrong size is refused.
    auto view = WeightMatrix::FromStorage(WeightFormat::kQ8_0, g->data(), g->bytes(), rows, cols, WeightLayout::kQ8Groups);
    ASSERT_TRUE(view.ok()) << view.status().ToString();
    view->Row(rows - 1, b.data());
    w.Row(rows - 1, a.data());
    EXPECT_EQ(a, b);
    EXPECT_FALSE(WeightMatrix::FromStorage(WeightFormat::kQ8_0, g->data(), g->bytes() - 1, rows, cols,
                                           WeightLayout::kQ8Groups)
                     .ok());
    const std::vector<float> x = test::GaussianWithOutliers(static_cast<size_t>(5 * cols), 5, 1.0f);
    for (const MatMulKernels* k : AvailableKernels()) {
      for (int64_t n : {1, 5}) {
        std::vector<float> own(static_cast<size_t>(n * rows)), other(own.size());
        w.ForKernels(*k)->MatMulWith(*k, x.data(), n, own.data(), &pool);
        const WeightMatrix& elsewhere = k->layout[static_cast<int>(WeightFormat::kQ8_0)] == WeightLayout::kRows ? *g : w;
        elsewhere.MatMulWith(*k, x.data(), n, other.data(), &pool);
        EXPECT_EQ(own, other) << k->name << " cols=" << cols << " n=" << n;
      }
    }
  }
  const WeightMatrix q4 = Make(2, 256, WeightFormat::kQ4K, 1);
  auto refused = q4.WithLayout(WeightLayout::kQ8Groups);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("q8_0"), std::string::npos) << refused.status().ToString();
  EXPECT_FALSE(WeightMatrix::FromStorage(WeightFormat::kQ4K, q4.data(), q4.bytes(), 2, 256, WeightLayout::kQ8Groups).ok());
}

TEST(QuantKernels, ConversionsAndRowsAgree) {
  const WeightMatrix src = Make(5, 300, WeightFormat::kF32, 3);
  std::vector<float> a(300), b(300);
  for (WeightFormat f : kFormats) {
    auto w = src.Quantize(f);
    ASSERT_TRUE(w.ok());
    EXPECT_EQ(w->format(), f);
    EXPECT_EQ(w->bytes(), w->row_bytes() * 5);
    // Converting again to the same format is the identity.
    auto again = w->Quantize(f);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->data(), w->data());
    for (int64_t r = 0; r < 5; ++r) {
      src.Row(r, a.data());
      w->Row(r, b.data());
      // A sanity bound only (outliers of 0.4 give Q4_K steps of ~0.06); the round-trip tests
      // above check the exact per-format bounds.
      for (int i = 0; i < 300; ++i) EXPECT_NEAR(a[i], b[i], 0.05f) << WeightFormatName(f);
    }
  }
  EXPECT_EQ(ParseQuantMode("q4"), QuantMode::kQ4);
  EXPECT_EQ(ParseQuantMode("q4m"), QuantMode::kQ4M);
  EXPECT_STREQ(QuantModeName(QuantMode::kQ4M), "q4m");
  EXPECT_EQ(ParseQuantMode("f32"), QuantMode::kNone);
  EXPECT_FALSE(ParseQuantMode("q5").has_value());
  EXPECT_EQ(EmbeddingFormat(QuantMode::kQ4), WeightFormat::kQ8_0);
  EXPECT_EQ(LinearFormat(QuantMode::kQ4), WeightFormat::kQ4K);
}

}  // namespace
}  // namespace phi4mm
