// AVX2 + FMA row of SiluGateUpRows (compiled with -mavx2 -mfma -mf16c; reached through
// SiluGateUpRowFor on the avx2 and avx512 ISAs): 8 columns at a time, exp(-g) by avx2_exp.h's Exp.
#include <immintrin.h>

#include "phi4mm/kernels/activations.h"
#include "phi4mm/kernels/avx2_exp.h"

namespace phi4mm::activation_internal {

void SiluGateUpRowAvx2(const float* g, const float* u, int64_t d, float* out) {
  const __m256 one = _mm256_set1_ps(1.0f);
  int64_t j = 0;
  for (; j + 8 <= d; j += 8) {
    const __m256 gv = _mm256_loadu_ps(g + j);
    const __m256 s = _mm256_div_ps(gv, _mm256_add_ps(one, avx2::Exp(_mm256_sub_ps(_mm256_setzero_ps(), gv))));
    _mm256_storeu_ps(out + j, _mm256_mul_ps(_mm256_loadu_ps(u + j), s));
  }
  if (j < d) SiluGateUpRowScalar(g + j, u + j, d - j, out + j);
}

}  // namespace phi4mm::activation_internal
