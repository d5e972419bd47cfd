// Horizontal reductions of AVX2 registers shared by the *_avx2.cc kernel files. Include only from
// files compiled with -mavx2 (CMake does that for src/phi4mm/kernels/*_avx2.cc and *_avx512.cc).
// Internal linkage (an anonymous namespace): the AVX-512 files' copy must never be the one the
// linker keeps for the AVX2 files, which it could do with an ordinary inline function.
#pragma once

#include <immintrin.h>

namespace phi4mm::avx2 {
namespace {

// The sum of the 4 floats of v, as (v0+v2) + (v1+v3).
inline float HSum(__m128 v) {
  v = _mm_add_ps(v, _mm_movehl_ps(v, v));
  v = _mm_add_ss(v, _mm_movehdup_ps(v));
  return _mm_cvtss_f32(v);
}

// The sum of the 8 floats of v, as ((v0+v4)+(v2+v6)) + ((v1+v5)+(v3+v7)).
inline float HSum(__m256 v) { return HSum(_mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1))); }

}  // namespace
}  // namespace phi4mm::avx2
