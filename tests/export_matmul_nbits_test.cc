// MatMulNBits weights (src/phi4mm/export/matmul_nbits.h): the rounding of ORT's own quantizer on
// hand-made blocks (the sign convention of the scale, halves rounded away from zero, ties between
// min and max, an all-zero block, the padding of a short last block), both bit widths, and the
// dequantized error bound on random rows. scripts/onnx_checks.sh compares whole exported
// decoders with the installed onnxruntime's quantizer, bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "phi4mm/export/matmul_nbits.h"

namespace phi4mm::exporter {
namespace {

int Q4(const NBitsMatrix& m, int64_t row, int64_t col) {
  const int64_t kb = m.k_blocks(), b = col / m.block, j = col % m.block;
  return (m.packed[static_cast<size_t>((row * kb + b) * (m.block / 2) + j / 2)] >> (4 * (j % 2))) & 0xf;
}

TEST(MatMulNBits, FourBitRoundingIsOrts) {
  // Block 0: peak -8 (largest magnitude, negative) -> scale 1, q = roundf(w + 8): 0.5 -> 9 (not 8:
  // roundf takes halves away from zero), 2.5 -> 11, -0.5 -> 8, 7 -> 15, 9 -> clamped 15.
  std::vector<float> w(64, 0.0f);
  w[0] = -8.0f;
  w[1] = 0.5f;
  w[2] = 2.5f;
  w[3] = -0.5f;
  w[4] = 7.0f;
  // Block 1: min and max tie in magnitude -> the min is the peak: scale -2/-8 = 0.25.
  w[32] = -2.0f;
  w[33] = 2.0f;
  const NBitsMatrix m = QuantizeNBits(w.data(), 1, 64, 4, 32);
  EXPECT_EQ(m.scales[0], 1.0f);
  EXPECT_EQ(Q4(m, 0, 0), 0);
  EXPECT_EQ(Q4(m, 0, 1), 9);
  EXPECT_EQ(Q4(m, 0, 2), 11);
  EXPECT_EQ(Q4(m, 0, 3), 8);
  EXPECT_EQ(Q4(m, 0, 4), 15);
  EXPECT_EQ(Q4(m, 0, 5), 8);  // zero
  EXPECT_EQ(m.scales[1], 0.25f);
  EXPECT_EQ(Q4(m, 0, 32), 0);
  EXPECT_EQ(Q4(m, 0, 33), 15);  // 2 / 0.25 + 8 = 16, clamped
  // Positive peak: scale is negative, so the peak maps to 0.
  std::vector<float> p(32, 0.0f);
  p[7] = 4.0f;
  p[8] = -1.0f;
  const NBitsMatrix mp = QuantizeNBits(p.data(), 1, 32, 4, 32);
  EXPECT_EQ(mp.scales[0], -0.5f);
  EXPECT_EQ(Q4(mp, 0, 7), 0);
  EXPECT_EQ(Q4(mp, 0, 8), 10);
  EXPECT_EQ(DequantizeNBits(mp, 0, 7), 4.0f);
}

TEST(MatMulNBits, ZeroBlockAndShortLastBlock) {
  std::vector<float> w(2 * 40, 0.0f);  // 2 rows, K = 40: blocks of 32 and 8 (24 padding values)
  for (int i = 32; i < 40; ++i) w[40 + i] = static_cast<float>(i - 36);
  const NBitsMatrix m = QuantizeNBits(w.data(), 2, 40, 4, 32);
  ASSERT_EQ(m.packed.size(), 2u * 2u * 16u);
  EXPECT_EQ(m.scales[0], 0.0f);  // all-zero block: scale 0, every q the zero point
  EXPECT_EQ(Q4(m, 0, 0), 8);
  EXPECT_EQ(m.scales[3], 0.5f);  // row 1, block 1: peak -4
  EXPECT_EQ(Q4(m, 1, 32), 0);
  EXPECT_EQ(Q4(m, 1, 39), 14);
  for (int j = 4; j < 16; ++j) EXPECT_EQ(m.packed[static_cast<size_t>(3 * 16 + j)], 0) << j;  // padding: zero bytes
}

TEST(MatMulNBits, EightBits) {
  std::vector<float> w(32, 0.0f);
  w[0] = 128.0f;
  w[1] = -127.0f;
  w[2] = 0.5f;
  const NBitsMatrix m = QuantizeNBits(w.data(), 1, 32, 8, 32);
  ASSERT_EQ(m.packed.size(), 32u);
  EXPECT_EQ(m.scales[0], -1.0f);
  EXPECT_EQ(m.packed[0], 0);
  EXPECT_EQ(m.packed[1], 255);
  EXPECT_EQ(m.packed[2], 128);  // -0.5 + 128 = 127.5 -> 128 (away from zero)
  EXPECT_EQ(m.packed[3], 128);
}

TEST(MatMulNBits, DequantizedErrorIsAtMostHalfAStep) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const int64_t n = 5, k = 96;
  std::vector<float> w(static_cast<size_t>(n * k));
  for (float& v : w) v = dist(rng);
  for (int bits : {4, 8}) {
    const NBitsMatrix m = QuantizeNBits(w.data(), n, k, bits, 32);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < k; ++c) {
        const float step = std::fabs(m.scales[static_cast<size_t>(r * m.k_blocks() + c / 32)]);
        // Half a step, plus the one level lost on the clamped side of a positive peak.
        const float bound = (bits == 4 ? 1.0f : 0.5f) * step * 1.0001f;
        EXPECT_LE(std::fabs(DequantizeNBits(m, r, c) - w[static_cast<size_t>(r * k + c)]), bound) << bits;
      }
  }
}

}  // namespace
}  // namespace phi4mm::exporter
