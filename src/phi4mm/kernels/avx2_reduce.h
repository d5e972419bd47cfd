// Horizontal reductions of AVX2 registers shared by the *_avx2.cc kernel files. Include only from
// files compiled with -mavx2 (CMake does that for src/phi4mm/kernels/*_avx2.cc).
#pragma once

#include <immintrin.h>

namespace phi4mm::avx2 {

// The sum of the 8 floats of v, as ((v0+v4)+(v2+v6)) + ((v1+v5)+(v3+v7)).
inline float HSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace phi4mm::avx2
