// The SIMD row of LayerNorm (ops.h), written once with Highway: each per-ISA file that includes it
// (norms_avx2.cc, norms_neon.cc) compiles it for its own target. Like the scalar row it sums the
// mean and the variance in double (each vector of N floats widened to two vectors of N/2 doubles,
// in two accumulators per pass), normalises in double, rounds to float, then multiplies by w and
// adds b as two float operations, so it differs from the scalar row only in the order of the
// double sums (and the variance's fused multiply-adds), far below a float's rounding. Internal
// linkage: include only from src/phi4mm/kernels/norms_<isa>.cc.
#pragma once

#include <hwy/highway.h>

#include <cmath>
#include <cstdint>

#include "phi4mm/kernels/ops.h"

HWY_BEFORE_NAMESPACE();
namespace phi4mm::HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;

void LayerNormRow(const float* x, const float* w, const float* b, int64_t dim, float eps, float* out) {
  using D = hn::ScalableTag<float>;
  const D df;
  const hn::Half<D> dh;
  const hn::Rebind<double, hn::Half<D>> dd;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const int64_t whole = dim - dim % N;
  auto lo = hn::Zero(dd), hi = hn::Zero(dd);
  for (int64_t j = 0; j < whole; j += N) {
    const auto v = hn::LoadU(df, x + j);
    lo = hn::Add(lo, hn::PromoteTo(dd, hn::LowerHalf(dh, v)));
    hi = hn::Add(hi, hn::PromoteTo(dd, hn::UpperHalf(dh, v)));
  }
  double mean = hn::GetLane(hn::SumOfLanes(dd, hn::Add(lo, hi)));
  for (int64_t j = whole; j < dim; ++j) mean += x[j];
  mean /= static_cast<double>(dim);

  const auto m = hn::Set(dd, mean);
  lo = hn::Zero(dd);
  hi = hn::Zero(dd);
  for (int64_t j = 0; j < whole; j += N) {
    const auto v = hn::LoadU(df, x + j);
    const auto a = hn::Sub(hn::PromoteTo(dd, hn::LowerHalf(dh, v)), m);
    const auto c = hn::Sub(hn::PromoteTo(dd, hn::UpperHalf(dh, v)), m);
    lo = hn::MulAdd(a, a, lo);
    hi = hn::MulAdd(c, c, hi);
  }
  double var = hn::GetLane(hn::SumOfLanes(dd, hn::Add(lo, hi)));
  for (int64_t j = whole; j < dim; ++j) {
    const double d = x[j] - mean;
    var += d * d;
  }
  var /= static_cast<double>(dim);
  const double rstd = 1.0 / std::sqrt(var + static_cast<double>(eps));

  const auto r = hn::Set(dd, rstd);
  for (int64_t j = 0; j < whole; j += N) {
    const auto v = hn::LoadU(df, x + j);
    const auto a = hn::DemoteTo(dh, hn::Mul(hn::Sub(hn::PromoteTo(dd, hn::LowerHalf(dh, v)), m), r));
    const auto c = hn::DemoteTo(dh, hn::Mul(hn::Sub(hn::PromoteTo(dd, hn::UpperHalf(dh, v)), m), r));
    const auto t = hn::Combine(df, c, a);
    hn::StoreU(hn::Add(hn::Mul(t, hn::LoadU(df, w + j)), hn::LoadU(df, b + j)), df, out + j);
  }
  for (int64_t j = whole; j < dim; ++j) out[j] = static_cast<float>((x[j] - mean) * rstd) * w[j] + b[j];
}

}  // namespace
}  // namespace phi4mm::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();
