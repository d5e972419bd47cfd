// The vector exponentials of the float kernels, written once with Highway (hwy/highway.h) and
// compiled by each SIMD kernel file that includes it for its own target (the AVX2 files: 8 lanes,
// the NEON files: 4): 2^x (the vision operators' flash softmax and tanh-GELU), a range-reduced
// degree-7 polynomial with relative error ~2e-7 over the clamped range [-126, 126]; and e^x (the
// SiLU gate) with the reduction by ln 2 in two parts (Cody and Waite), so that its error stays
// ~2 ulp however large |x| is (2^(x·log2 e) would add the rounding of x·log2 e, a relative error of
// ~6e-8·|x|). Each operation maps to one instruction on both targets (Round: vroundps / frintn,
// MulAdd: vfmadd / fmla, NegMulAdd: vfnmadd / fmls), so every table computes the same bits.
// Internal linkage inside Highway's per-target namespace: include only from the per-ISA files
// (src/phi4mm/kernels/*_avx2.cc, *_neon.cc; kernels/isa.h).
#pragma once

#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace phi4mm::HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;

// 2^n for float lanes n holding integers in [-126, 127], through the exponent bits: n + 127 + 2^23
// is a float in [2^23, 2^24) whose 23 mantissa bits are n + 127, and shifting its bits left by 23
// leaves n + 127 in the exponent field. (Highway's ConvertTo would add a fix-up for out-of-range
// lanes to the vcvttps2dq: 15 % of the SiLU row's time.)
template <class D>
HWY_INLINE hn::VFromD<D> Pow2I(D d, hn::VFromD<D> n) {
  const hn::RebindToSigned<D> di;
  return hn::BitCast(d, hn::ShiftLeft<23>(hn::BitCast(di, hn::Add(n, hn::Set(d, 127.0f + 8388608.0f)))));
}

// p(r) = Σ_{k<=7} r^k / k!, Horner.
template <class D>
HWY_INLINE hn::VFromD<D> ExpTaylor7(D d, hn::VFromD<D> r) {
  auto p = hn::Set(d, 1.0f / 5040.0f);
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 720.0f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 120.0f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 24.0f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 6.0f));
  p = hn::MulAdd(p, r, hn::Set(d, 0.5f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f));
  return hn::MulAdd(p, r, hn::Set(d, 1.0f));
}

// 2^x for x in [-126, 126] (clamped): x = n + f with n = round(x), |f| <= 0.5; 2^f = e^(f·ln 2)
// by its Taylor series to degree 7; 2^n through the exponent bits.
template <class D>
HWY_INLINE hn::VFromD<D> Exp2(D d, hn::VFromD<D> x) {
  x = hn::Min(hn::Max(x, hn::Set(d, -126.0f)), hn::Set(d, 126.0f));
  const auto n = hn::Round(x);
  const auto f = hn::Mul(hn::Sub(x, n), hn::Set(d, 0.6931471805599453f));  // f * ln 2
  return hn::Mul(ExpTaylor7(d, f), Pow2I(d, n));
}

// e^x for x in [-87, 88] (clamped): n = round(x·log2 e), r = x - n·ln 2 (ln 2 split so that n·hi is
// exact), |r| <= 0.35; e^r by its Taylor series to degree 7 (error below 6e-9); 2^n through the
// exponent bits.
template <class D>
HWY_INLINE hn::VFromD<D> Exp(D d, hn::VFromD<D> x) {
  x = hn::Min(hn::Max(x, hn::Set(d, -87.0f)), hn::Set(d, 88.0f));
  const auto n = hn::Round(hn::Mul(x, hn::Set(d, 1.4426950408889634f)));
  auto r = hn::NegMulAdd(n, hn::Set(d, 0.693145751953125f), x);  // ln 2's high part: 15 bits
  r = hn::NegMulAdd(n, hn::Set(d, 1.428606765330187e-06f), r);    // ln 2 - high part
  return hn::Mul(ExpTaylor7(d, r), Pow2I(d, n));
}

}  // namespace
}  // namespace phi4mm::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();
