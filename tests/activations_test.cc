// The gated activations of kernels/activations.h: every SIMD row kernel (SwiGLU, gated swish,
// swish) against the scalar one on a sweep of gates (tails included), the scalar SwiGLU row against
// ops.h's SiluGateUp bit for bit, and the pool-split SiluGateUpRows against row-by-row application
// (a row's result may not depend on the thread or on the other rows).
#include <gtest/gtest.h>

#include <cmath>

#include "phi4mm/kernels/activations.h"
#include "phi4mm/kernels/ops.h"
#include "test_util.h"

namespace phi4mm {
namespace {

using activation_internal::SiluGateUpRowScalar;
using activation_internal::ActivationKernelsFor;

// The gate sweep of every test: [-20, 20] in steps of 0.005, the clamps' edges, and a length of 8k +
// 3 and 4k + 3 so that every table's scalar tail runs.
std::vector<float> GateSweep() {
  std::vector<float> g;
  for (int i = -4000; i <= 4000; ++i) g.push_back(static_cast<float>(i) * 0.005f);
  for (float big : {-200.0f, -88.0f, -87.0f, -30.0f, 30.0f, 88.0f, 200.0f, 0.0f, -0.0f}) g.push_back(big);
  g.resize(g.size() | 3, 0.7f);
  return g;
}

TEST(OpsActivations, EverySimdSiluGateUpRowMatchesScalar) {
  const std::vector<float> g = GateSweep();
  const std::vector<float> u = test::Gaussian(g.size(), 11, 2.0f);
  const int64_t d = static_cast<int64_t>(g.size());
  std::vector<float> want(g.size());
  SiluGateUpRowScalar(g.data(), u.data(), d, want.data());
  int simd = 0;
  for (Isa isa : AvailableIsas()) {
    const auto row = ActivationKernelsFor(isa).silu_gate_up_row;
    if (row == &SiluGateUpRowScalar) continue;
    ++simd;
    SCOPED_TRACE(IsaName(isa));
    std::vector<float> got(g.size());
    row(g.data(), u.data(), d, got.data());
    // exp with a two-part reduction by ln 2 (~2 ulp), then a division and a product: at most
    // 2.6e-7 of the result over g in [-80, 80] on avx2 here, so 5e-7; gates below -87 underflow
    // differently (the clamp at e^-87 against exp's denormals), hence 1e-30 per unit of |u|.
    for (size_t j = 0; j < g.size(); ++j)
      EXPECT_NEAR(got[j], want[j], 5e-7 * std::fabs(want[j]) + 1e-30 * (1 + std::fabs(u[j]))) << "g = " << g[j];
  }
  if (simd == 0) GTEST_SKIP() << "this CPU offers only the scalar row";
}

// The gated swish with and without its two biases, and the swish in place: the same bound as the
// SwiGLU row (the same exp, division and product), the bias added first in both.
TEST(OpsActivations, EverySimdGatedSwishAndSwishMatchScalar) {
  const std::vector<float> g = GateSweep();
  const int64_t d = static_cast<int64_t>(g.size());
  const std::vector<float> v = test::Gaussian(g.size(), 21, 2.0f), vb = test::Gaussian(g.size(), 22, 0.5f),
                           gb = test::Gaussian(g.size(), 23, 0.5f);
  const auto& scalar = ActivationKernelsFor(Isa::kScalar);
  int simd = 0;
  for (Isa isa : AvailableIsas()) {
    const auto& k = ActivationKernelsFor(isa);
    if (k.swish == scalar.swish) continue;
    ++simd;
    SCOPED_TRACE(IsaName(isa));
    for (bool bias : {false, true}) {
      SCOPED_TRACE(bias ? "with biases" : "no biases");
      std::vector<float> want(g.size()), got(g.size());
      scalar.gated_swish_row(v.data(), g.data(), bias ? vb.data() : nullptr, bias ? gb.data() : nullptr, d, want.data());
      k.gated_swish_row(v.data(), g.data(), bias ? vb.data() : nullptr, bias ? gb.data() : nullptr, d, got.data());
      for (size_t j = 0; j < g.size(); ++j) {
        const float value = v[j] + (bias ? vb[j] : 0.0f);
        EXPECT_NEAR(got[j], want[j], 5e-7 * std::fabs(want[j]) + 1e-30 * (1 + std::fabs(value))) << "g = " << g[j];
      }
    }
    std::vector<float> want = g, got = g;
    scalar.swish(want.data(), d);
    k.swish(got.data(), d);
    for (size_t j = 0; j < g.size(); ++j) EXPECT_NEAR(got[j], want[j], 5e-7 * std::fabs(want[j]) + 1e-30) << "x = " << g[j];
  }
  if (simd == 0) GTEST_SKIP() << "this CPU offers only the scalar rows";
}

TEST(OpsActivations, ScalarRowIsOpsSiluGateUp) {
  const int64_t n = 3, d = 13;
  const std::vector<float> gu = test::Gaussian(static_cast<size_t>(n * 2 * d), 12, 4.0f);
  std::vector<float> want(static_cast<size_t>(n * d)), got(want.size());
  SiluGateUp(gu.data(), n, d, want.data());
  for (int64_t i = 0; i < n; ++i) SiluGateUpRowScalar(gu.data() + i * 2 * d, gu.data() + i * 2 * d + d, d, got.data() + i * d);
  EXPECT_EQ(got, want);
}

TEST(OpsActivations, RowsSplitOverThreadsEqualEachRowAlone) {
  const int64_t d = 8192 + 5;
  ThreadPool pool(3);
  const auto row = ActivationKernelsFor(ActiveIsa()).silu_gate_up_row;
  for (int64_t n : {1, 2, 7, 33}) {
    SCOPED_TRACE(n);
    const std::vector<float> gu = test::Gaussian(static_cast<size_t>(n * 2 * d), 13 + n, 3.0f);
    std::vector<float> got(static_cast<size_t>(n * d)), want(got.size());
    SiluGateUpRows(gu.data(), n, d, got.data(), &pool);
    for (int64_t i = 0; i < n; ++i) row(gu.data() + i * 2 * d, gu.data() + i * 2 * d + d, d, want.data() + i * d);
    EXPECT_EQ(got, want);
  }
}

}  // namespace
}  // namespace phi4mm
