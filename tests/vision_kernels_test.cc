// The vision kernels against their scalar references: every SIMD table's flash-style attention
// (odd sequence lengths that leave partial query and key blocks, head sizes that are not a multiple
// of 8, masked keys, a sequence with no valid key, one position), the SIMD tanh-GELU (vector body
// and scalar tail, large |x|), and the row-parallel bias / GELU / residual steps (bit-exact: same
// operations in the same order). Tolerances are stated next to each check with their reason.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <utility>
#include <vector>

#include "phi4mm/kernels/isa.h"
#include "phi4mm/kernels/ops.h"
#include "phi4mm/kernels/vision_ops.h"
#include "test_util.h"

namespace phi4mm {
namespace {

// Whether the process's vision table is the scalar one (then the dispatching entry points are
// bit-exact against the scalar code).
bool ActiveIsScalar() {
  return &vision_internal::VisionKernelsFor(ActiveIsa()) == &vision_internal::VisionKernelsFor(Isa::kScalar);
}

// The non-scalar vision tables of the ISAs this CPU offers (the dispatch point's list), each once.
std::vector<std::pair<Isa, const vision_internal::VisionKernels*>> SimdTables() {
  std::vector<std::pair<Isa, const vision_internal::VisionKernels*>> t;
  const auto* scalar = &vision_internal::VisionKernelsFor(Isa::kScalar);
  for (Isa isa : AvailableIsas()) {
    const auto* k = &vision_internal::VisionKernelsFor(isa);
    bool seen = k == scalar;
    for (const auto& e : t) seen = seen || e.second == k;
    if (!seen) t.emplace_back(isa, k);
  }
  return t;
}

struct AttentionCase {
  int64_t batch, seq, heads, head_dim;
  int mask;  // 0: none; 1: a valid prefix per sequence (sequence 1 has none valid); 2: random keys
};

class VisionKernelsAttention : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(VisionKernelsAttention, EverySimdTableMatchesReference) {
  const auto tables = SimdTables();
  if (tables.empty()) GTEST_SKIP() << "this CPU offers only the scalar vision table";
  for (const auto& [isa, table] : tables) {
  SCOPED_TRACE(IsaName(isa));
  const AttentionCase c = GetParam();
  const BatchAttentionShape s{c.batch, c.seq, c.heads, c.head_dim,
                              static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim)))};
  const size_t n = static_cast<size_t>(c.batch * c.seq * c.heads * c.head_dim);
  // Scale 2 gives scores of a few units: peaked softmax rows, so a wrong max or mask shows.
  const std::vector<float> q = test::Gaussian(n, 1, 2.0f), k = test::Gaussian(n, 2, 2.0f), v = test::Gaussian(n, 3, 1.0f);
  std::vector<uint8_t> valid(static_cast<size_t>(c.batch * c.seq), 1);
  std::mt19937 rng(4);
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t j = 0; j < c.seq; ++j) {
      uint8_t& m = valid[b * c.seq + j];
      if (c.mask == 1) m = b == 1 ? 0 : j < (c.seq * 2) / 3 + 1;
      if (c.mask == 2) m = rng() % 3 != 0;
    }
  const uint8_t* kv = c.mask == 0 ? nullptr : valid.data();
  std::vector<float> want(n), got(n, NAN);
  BidirectionalAttentionReference(q.data(), k.data(), v.data(), kv, s, want.data(), nullptr);
  ThreadPool pool(2);
  table->attention(q.data(), k.data(), v.data(), kv, s, got.data(), &pool);
  // Each output is a convex combination of V rows (|v| <~ 5): float accumulation over <= 200 keys
  // and exp2 with ~2e-7 relative error stay far below 1e-5 absolute (the reference accumulates in
  // double).
  double worst = 0;
  for (size_t i = 0; i < n; ++i) worst = std::max(worst, static_cast<double>(std::fabs(got[i] - want[i])));
  EXPECT_LE(worst, 1e-5) << "batch " << c.batch << " seq " << c.seq << " hd " << c.head_dim;
  // The dispatching entry point gives the same bits as the active ISA's kernel.
  if (isa == ActiveIsa()) {
    std::vector<float> disp(n);
    BidirectionalAttention(q.data(), k.data(), v.data(), kv, s, disp.data(), nullptr);
    EXPECT_EQ(disp, got);
  }
  }
}

INSTANTIATE_TEST_SUITE_P(
    VisionKernels, VisionKernelsAttention,
    ::testing::Values(AttentionCase{1, 1, 1, 8, 0}, AttentionCase{2, 5, 3, 13, 0}, AttentionCase{2, 47, 2, 72, 0},
                      AttentionCase{3, 49, 2, 72, 1}, AttentionCase{2, 97, 3, 16, 2}, AttentionCase{2, 130, 2, 24, 1},
                      AttentionCase{1, 200, 1, 5, 2}, AttentionCase{2, 65, 2, 40, 2}));

TEST(VisionKernels, EverySimdGeluTanhMatchesScalar) {
  const auto tables = SimdTables();
  if (tables.empty()) GTEST_SKIP() << "this CPU offers only the scalar vision table";
  for (const auto& [isa, table] : tables) {
  SCOPED_TRACE(IsaName(isa));
  std::vector<float> x;
  for (int i = -4000; i <= 4000; ++i) x.push_back(static_cast<float>(i) * 0.0025f);  // [-10, 10]
  for (float big : {-200.0f, -30.0f, -9.5f, 9.5f, 30.0f, 200.0f, 0.0f}) x.push_back(big);
  x.resize(x.size() | 1, 0.3f);  // an odd length: the last elements take the scalar tail
  std::vector<float> want = x, got = x;
  GeluTanhInPlace(want.data(), static_cast<int64_t>(want.size()));
  table->gelu_tanh(got.data(), static_cast<int64_t>(got.size()));
  // x / (1 + exp(-2u)) instead of 0.5x(1 + tanh u): a few float roundings apart, so 4e-7 relative
  // to |x| (GELU(x) is within |x|) plus 1e-30 for results that underflow differently.
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 4e-7 * std::fabs(x[i]) + 1e-30) << "x = " << x[i];
  }
}

TEST(VisionKernels, BiasGeluResidualRowsMatchScalar) {
  const int64_t n = 37, dim = 21;
  const std::vector<float> y0 = test::Gaussian(static_cast<size_t>(n * dim), 5, 3.0f), bias = test::Gaussian(dim, 6, 1.0f),
                           h0 = test::Gaussian(static_cast<size_t>(n * dim), 7, 1.0f);
  ThreadPool pool(2);
  std::vector<float> want = y0, got = y0;
  AddBiasRows(want.data(), bias.data(), n, dim);
  AddBiasParallel(got.data(), bias.data(), n, dim, &pool);
  EXPECT_EQ(got, want);

  std::vector<float> h_want = h0, h_got = h0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < dim; ++j) h_want[i * dim + j] += y0[i * dim + j] + bias[j];
  AddBiasResidual(h_got.data(), y0.data(), bias.data(), n, dim, &pool);
  EXPECT_EQ(h_got, h_want);

  want = y0;
  got = y0;
  AddBiasRows(want.data(), bias.data(), n, dim);
  GeluTanhInPlace(want.data(), n * dim);
  AddBiasGeluTanh(got.data(), bias.data(), n, dim, &pool);
  for (size_t i = 0; i < want.size(); ++i) {
    const float pre = y0[i] + bias[i % dim];
    if (!ActiveIsScalar()) {
      EXPECT_NEAR(got[i], want[i], 4e-7 * std::fabs(pre) + 1e-30) << i;  // as EverySimdGeluTanhMatchesScalar
    } else {
      EXPECT_EQ(got[i], want[i]) << i;
    }
  }
}

}  // namespace
}  // namespace phi4mm
