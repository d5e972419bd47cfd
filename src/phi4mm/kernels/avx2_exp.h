// The vector exponentials shared by the AVX2 kernel files: 2^x (the vision operators' flash softmax
// and tanh-GELU), a range-reduced degree-7 polynomial with relative error ~2e-7 over the clamped
// range [-126, 126]; and e^x (the SiLU gate) with the reduction by ln 2 in two parts (Cody and
// Waite), so that its error stays ~2 ulp however large |x| is (2^(x·log2 e) would add the rounding
// of x·log2 e, a relative error of ~6e-8·|x|). Include only from files compiled with
// -mavx2 -mfma (src/phi4mm/kernels/*_avx2.cc). Internal linkage, as in avx2_reduce.h.
#pragma once

#include <immintrin.h>

namespace phi4mm::avx2 {
namespace {

// 2^x for x in [-126, 126] (clamped): x = n + f with n = round(x), |f| <= 0.5; 2^f by its Taylor
// series to degree 7; 2^n through the exponent bits.
inline __m256 Exp2(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-126.0f)), _mm256_set1_ps(126.0f));
  const __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_mul_ps(_mm256_sub_ps(x, n), _mm256_set1_ps(0.6931471805599453f));  // f * ln 2
  __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f / 720.0f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// e^x for x in [-87, 88] (clamped): n = round(x·log2 e), r = x - n·ln 2 (ln 2 split so that n·hi is
// exact), |r| <= 0.35; e^r by its Taylor series to degree 7 (error below 6e-9); 2^n through the
// exponent bits.
inline __m256 Exp(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.4426950408889634f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);  // ln 2's high part: 15 bits
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187e-06f), r);     // ln 2 - high part
  __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

}  // namespace
}  // namespace phi4mm::avx2
