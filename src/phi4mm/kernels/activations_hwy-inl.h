// The SIMD row of SiluGateUpRows, written once with Highway: each per-ISA file that includes it
// (activations_avx2.cc, activations_neon.cc) compiles it for its own target and exports it under
// its ISA's name. A row is out = u · g / (1 + e^-g), one vector of floats at a time (8 lanes on
// AVX2, 4 on NEON), e^x from exp_hwy-inl.h; the columns past the last whole vector go through the
// scalar row. Internal linkage: include only from src/phi4mm/kernels/activations_<isa>.cc.
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

}  // namespace
}  // namespace phi4mm::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();
