// The vector 2^x shared by the NEON kernel files that need an exponential (the vision operators'
// flash softmax and tanh-GELU, the decoder's SiLU gate): avx2_exp.h's range-reduced degree-7
// polynomial with 4-wide vectors (relative error ~2e-7 over the clamped range [-126, 126]).
// Include only from src/phi4mm/kernels/*_neon.cc. Internal linkage, as in neon_tile.h.
#pragma once

#include <arm_neon.h>

namespace phi4mm::neon {
namespace {

// 2^x for x in [-126, 126] (clamped): x = n + f with n = round(x), |f| <= 0.5; 2^f by its Taylor
// series to degree 7; 2^n through the exponent bits.
inline float32x4_t Exp2(float32x4_t x) {
  x = vminq_f32(vmaxq_f32(x, vdupq_n_f32(-126.0f)), vdupq_n_f32(126.0f));
  const float32x4_t n = vrndnq_f32(x);
  const float32x4_t f = vmulq_n_f32(vsubq_f32(x, n), 0.6931471805599453f);  // f * ln 2
  float32x4_t p = vdupq_n_f32(1.0f / 5040.0f);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 720.0f), p, f);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 120.0f), p, f);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 24.0f), p, f);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 6.0f), p, f);
  p = vfmaq_f32(vdupq_n_f32(0.5f), p, f);
  p = vfmaq_f32(vdupq_n_f32(1.0f), p, f);
  p = vfmaq_f32(vdupq_n_f32(1.0f), p, f);
  const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtnq_s32_f32(n), vdupq_n_s32(127)), 23);
  return vmulq_f32(p, vreinterpretq_f32_s32(e));
}

// e^x for x in [-87, 88] (clamped), as avx2_exp.h's Exp: n = round(x·log2 e), r = x - n·ln 2 in
// two parts, e^r by its Taylor series to degree 7, 2^n through the exponent bits.
inline float32x4_t Exp(float32x4_t x) {
  x = vminq_f32(vmaxq_f32(x, vdupq_n_f32(-87.0f)), vdupq_n_f32(88.0f));
  const float32x4_t n = vrndnq_f32(vmulq_n_f32(x, 1.4426950408889634f));
  float32x4_t r = vfmsq_f32(x, n, vdupq_n_f32(0.693145751953125f));  // ln 2's high part: 15 bits
  r = vfmsq_f32(r, n, vdupq_n_f32(1.428606765330187e-06f));           // ln 2 - high part
  float32x4_t p = vdupq_n_f32(1.0f / 5040.0f);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 720.0f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 120.0f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 24.0f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 6.0f), p, r);
  p = vfmaq_f32(vdupq_n_f32(0.5f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
  const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtnq_s32_f32(n), vdupq_n_s32(127)), 23);
  return vmulq_f32(p, vreinterpretq_f32_s32(e));
}

}  // namespace
}  // namespace phi4mm::neon
