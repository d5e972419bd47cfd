// The SIMD rows of the gated activations (activations.h), written once with Highway: each per-ISA
// file that includes it (activations_avx2.cc, activations_neon.cc) compiles it for its own target
// and exports it under its ISA's name. One vector of floats at a time (8 lanes on AVX2, 4 on NEON),
// e^x from exp_hwy-inl.h; the columns past the last whole vector go through the scalar row.
// Internal linkage: include only from src/phi4mm/kernels/activations_<isa>.cc.
#pragma once

#include <hwy/highway.h>

#include "phi4mm/kernels/activations.h"
#include "phi4mm/kernels/exp_hwy-inl.h"

HWY_BEFORE_NAMESPACE();
namespace phi4mm::HWY_NAMESPACE {
namespace {

void SiluGateUpRow(const float* g, const float* u, int64_t d, float* out) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto one = hn::Set(df, 1.0f);
  int64_t j = 0;
  for (; j + N <= d; j += N) {
    const auto gv = hn::LoadU(df, g + j);
    const auto s = hn::Div(gv, hn::Add(one, Exp(df, hn::Neg(gv))));
    hn::StoreU(hn::Mul(hn::LoadU(df, u + j), s), df, out + j);
  }
  if (j < d) activation_internal::SiluGateUpRowScalar(g + j, u + j, d - j, out + j);
}

// x / (1 + e^-x).
template <class D>
HWY_INLINE hn::VFromD<D> Swish(D d, hn::VFromD<D> x) {
  return hn::Div(x, hn::Add(hn::Set(d, 1.0f), Exp(d, hn::Neg(x))));
}

void GatedSwishRow(const float* value, const float* gate, const float* vb, const float* gb, int64_t d, float* out) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  int64_t j = 0;
  for (; j + N <= d; j += N) {
    auto g = hn::LoadU(df, gate + j), v = hn::LoadU(df, value + j);
    if (gb != nullptr) g = hn::Add(g, hn::LoadU(df, gb + j));
    if (vb != nullptr) v = hn::Add(v, hn::LoadU(df, vb + j));
    hn::StoreU(hn::Mul(v, Swish(df, g)), df, out + j);
  }
  if (j < d)
    activation_internal::GatedSwishRowScalar(value + j, gate + j, vb ? vb + j : nullptr, gb ? gb + j : nullptr, d - j,
                                             out + j);
}

void SwishRow(float* x, int64_t n) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(Swish(df, hn::LoadU(df, x + i)), df, x + i);
  if (i < n) activation_internal::SwishScalar(x + i, n - i);
}

}  // namespace
}  // namespace phi4mm::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();
