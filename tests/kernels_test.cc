// Kernel tests against straightforward double-precision references on odd shapes and tails:
// WeightMatrix products in every storage format (aligned and unaligned data, accumulate, threads),
// RMSNorm, SwiGLU, rotary, LayerNorm (every ISA's row against a double reference), causal GQA
// attention, and the thread pool's coverage of a range.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>

#include "phi4mm/base/half.h"
#include "phi4mm/kernels/attention.h"
#include "phi4mm/kernels/isa.h"
#include "phi4mm/kernels/ops.h"
#include "phi4mm/kernels/weight_matrix.h"
#include "test_util.h"

namespace phi4mm {
namespace {

TEST(ThreadPool, CoversTheRangeExactlyOnce) {
  ThreadPool pool(3);
  for (int64_t n : {0, 1, 2, 3, 7, 100, 1001}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    pool.ParallelFor(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[i]++;
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
  }
}

class WeightMatrixTest : public ::testing::TestWithParam<DType> {};

TEST_P(WeightMatrixTest, MatMulMatchesReference) {
  const DType dt = GetParam();
  ThreadPool pool(2);
  for (auto [rows, cols, n] : {std::tuple{1, 1, 1}, {7, 13, 3}, {33, 70, 5}, {130, 9, 1}, {5, 257, 17}}) {
    const std::vector<float> w32 = test::Gaussian(static_cast<size_t>(rows * cols), rows * 131 + cols);
    const std::vector<float> x = test::Gaussian(static_cast<size_t>(n * cols), 7 + n);
    // Store in the format (+1 element offset to make the data unaligned), and the exact values it holds.
    std::vector<uint8_t> store(static_cast<size_t>(rows * cols) * 4 + 8);
    std::vector<float> exact(w32.size());
    for (bool unaligned : {false, true}) {
      uint8_t* base = store.data() + (unaligned ? 1 : 0);
      for (size_t i = 0; i < w32.size(); ++i) {
        if (dt == DType::kF32) {
          std::memcpy(base + 4 * i, &w32[i], 4);
          exact[i] = w32[i];
        } else {
          const uint16_t h = dt == DType::kBF16 ? F32ToBf16(w32[i]) : F32ToF16(w32[i]);
          std::memcpy(base + 2 * i, &h, 2);
          exact[i] = dt == DType::kBF16 ? Bf16ToF32(h) : F16ToF32(h);
        }
      }
      auto w = WeightMatrix::FromData(dt, base, rows, cols);
      ASSERT_TRUE(w.ok());
      std::vector<float> y(static_cast<size_t>(n * rows), 0.5f), y2 = y;
      w->MatMul(x.data(), n, y.data(), &pool);
      w->MatMul(x.data(), n, y2.data(), nullptr, /*accumulate=*/true);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t r = 0; r < rows; ++r) {
          double ref = 0;
          for (int64_t c = 0; c < cols; ++c) ref += static_cast<double>(exact[r * cols + c]) * x[i * cols + c];
          const double tol = 1e-5 * (1 + std::sqrt(static_cast<double>(cols)));
          ASSERT_NEAR(y[i * rows + r], ref, tol) << rows << "x" << cols << " n=" << n;
          ASSERT_NEAR(y2[i * rows + r], ref + 0.5, tol);
        }
      std::vector<float> row(static_cast<size_t>(cols));
      w->Row(rows - 1, row.data());
      for (int64_t c = 0; c < cols; ++c) ASSERT_EQ(row[c], exact[(rows - 1) * cols + c]);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, WeightMatrixTest, ::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

TEST(WeightMatrix, RejectsUnsupportedDtypes) {
  int64_t data[4] = {};
  auto w = WeightMatrix::FromData(DType::kI64, data, 2, 2);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(w.status().message().find("I64"), std::string::npos);
}

TEST(Ops, RmsNormSiluRotary) {
  const int64_t n = 3, d = 11;
  const std::vector<float> x = test::Gaussian(n * d, 1), w = test::Gaussian(d, 2);
  std::vector<float> y(n * d);
  RmsNorm(x.data(), w.data(), n, d, 1e-5f, y.data());
  for (int64_t i = 0; i < n; ++i) {
    double ss = 0;
    for (int64_t j = 0; j < d; ++j) ss += x[i * d + j] * x[i * d + j];
    const double inv = 1 / std::sqrt(ss / d + 1e-5);
    for (int64_t j = 0; j < d; ++j) EXPECT_NEAR(y[i * d + j], w[j] * x[i * d + j] * inv, 1e-5);
  }
  const std::vector<float> gu = test::Gaussian(n * 2 * d, 3);
  std::vector<float> act(n * d);
  SiluGateUp(gu.data(), n, d, act.data());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) {
      const double g = gu[i * 2 * d + j], u = gu[i * 2 * d + d + j];
      EXPECT_NEAR(act[i * d + j], u * g / (1 + std::exp(-g)), 1e-5);
    }
  // Rotary on 2 heads of 8 with 6 rotary dims: dims 6 and 7 pass through.
  std::vector<float> v = test::Gaussian(16, 4), v0 = v;
  const float cos[6] = {0.1f, 0.2f, 0.3f, 0.1f, 0.2f, 0.3f}, sin[6] = {0.9f, 0.8f, 0.7f, 0.9f, 0.8f, 0.7f};
  ApplyRotary(v.data(), 2, 8, 6, cos, sin);
  for (int h = 0; h < 2; ++h) {
    const float* a = v0.data() + 8 * h;
    const float* b = v.data() + 8 * h;
    for (int i = 0; i < 6; ++i) {
      const float rot = i < 3 ? -a[i + 3] : a[i - 3];
      EXPECT_NEAR(b[i], a[i] * cos[i] + rot * sin[i], 1e-6);
    }
    EXPECT_EQ(b[6], a[6]);
    EXPECT_EQ(b[7], a[7]);
  }
}

// Every table's LayerNorm row (the SIMD ones sum in another order) against a double-precision
// reference, on widths with and without a vector tail, rows with a large mean (the two-pass
// variance keeps it exact), in place and not.
TEST(Ops, LayerNormRowOfEveryIsaMatchesReference) {
  for (int64_t dim : {1, 3, 8, 13, 1024, 1152 + 5}) {
    SCOPED_TRACE(dim);
    std::vector<float> x = test::Gaussian(static_cast<size_t>(dim), 31 + dim, 2.0f);
    for (float& v : x) v += 40.0f;
    const std::vector<float> w = test::Gaussian(x.size(), 32, 1.0f), b = test::Gaussian(x.size(), 33, 0.5f);
    const float eps = 1e-5f;
    double mean = 0, var = 0;
    for (float v : x) mean += v;
    mean /= static_cast<double>(dim);
    for (float v : x) var += (v - mean) * (v - mean);
    var /= static_cast<double>(dim);
    for (Isa isa : AvailableIsas()) {
      SCOPED_TRACE(IsaName(isa));
      const auto row = ops_internal::LayerNormRowFor(isa);
      std::vector<float> got(x.size()), inplace = x;
      row(x.data(), w.data(), b.data(), dim, eps, got.data());
      row(inplace.data(), w.data(), b.data(), dim, eps, inplace.data());
      EXPECT_EQ(inplace, got);
      for (int64_t j = 0; j < dim; ++j) {
        const double want = (x[j] - mean) / std::sqrt(var + eps) * w[j] + b[j];
        EXPECT_NEAR(got[j], want, 1e-6 * (1 + std::fabs(want))) << "j = " << j;
      }
    }
  }
}

TEST(Attention, CausalGqaMatchesReference) {
  ThreadPool pool(2);
  const AttentionShape sh{6, 2, 5, 0.37f};
  for (auto [past, S] : {std::pair{0, 1}, {0, 7}, {4, 3}, {9, 1}}) {
    const int64_t T = past + S;
    const std::vector<float> q = test::Gaussian(S * 6 * 5, 11), k = test::Gaussian(T * 2 * 5, 12), v = test::Gaussian(T * 2 * 5, 13);
    std::vector<float> out(S * 6 * 5);
    CausalAttention(q.data(), k.data(), v.data(), past, S, sh, out.data(), &pool);
    for (int64_t s = 0; s < S; ++s)
      for (int64_t h = 0; h < 6; ++h) {
        const int64_t g = h / 3, len = past + s + 1;
        std::vector<double> p(len);
        double mx = -1e30, sum = 0;
        for (int64_t t = 0; t < len; ++t) {
          double dot = 0;
          for (int d = 0; d < 5; ++d) dot += q[(s * 6 + h) * 5 + d] * k[(t * 2 + g) * 5 + d];
          p[t] = dot * 0.37;
          mx = std::max(mx, p[t]);
        }
        for (double& e : p) sum += (e = std::exp(e - mx));
        for (int d = 0; d < 5; ++d) {
          double o = 0;
          for (int64_t t = 0; t < len; ++t) o += p[t] / sum * v[(t * 2 + g) * 5 + d];
          ASSERT_NEAR(out[(s * 6 + h) * 5 + d], o, 1e-5);
        }
      }
  }
}

}  // namespace
}  // namespace phi4mm
