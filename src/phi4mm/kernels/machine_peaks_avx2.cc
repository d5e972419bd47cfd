// AVX2 + FMA kernels of MeasureMachinePeaks (compiled with -mavx2 -mfma -mf16c; called only when
// the CPU has them): a streaming read with four independent 256-bit integer adds per 128 bytes, 12
// independent vfmadd231ps chains, and 8 independent vpmaddubsw -> vpmaddwd -> vpaddd chains (the
// instruction mix of the Q8_0 / Q4_K dot products).
#include <immintrin.h>

#include "phi4mm/kernels/machine_peaks.h"

namespace phi4mm::peaks_internal {

uint64_t ReadSumAvx2(const uint8_t* p, size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 128 <= n; i += 128) {
    a0 = _mm256_add_epi64(a0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_add_epi64(a2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_add_epi64(a3, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  const __m256i s = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  alignas(32) uint64_t w[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(w), s);
  return w[0] + w[1] + w[2] + w[3];
}

float FmaLoopAvx2(int64_t iters, float seed) {
  __m256 acc[12];
  for (int c = 0; c < 12; ++c) acc[c] = _mm256_set1_ps(seed + static_cast<float>(c));
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-3f);
  for (int64_t i = 0; i < iters; ++i)
    for (int c = 0; c < 12; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
  __m256 s = acc[0];
  for (int c = 1; c < 12; ++c) s = _mm256_add_ps(s, acc[c]);
  alignas(32) float w[8];
  _mm256_store_ps(w, s);
  return w[0] + w[1] + w[2] + w[3] + w[4] + w[5] + w[6] + w[7];
}

int32_t Int8LoopAvx2(int64_t iters, int32_t seed) {
  __m256i acc[8];
  __m256i x[8];
  for (int c = 0; c < 8; ++c) {
    acc[c] = _mm256_setzero_si256();
    x[c] = _mm256_set1_epi8(static_cast<char>(seed + c));
  }
  const __m256i w = _mm256_set1_epi8(3), ones = _mm256_set1_epi16(1);
  for (int64_t i = 0; i < iters; ++i)
    for (int c = 0; c < 8; ++c) {
      __asm__ volatile("" : "+x"(x[c]));  // keep the products inside the loop
      acc[c] = _mm256_add_epi32(acc[c], _mm256_madd_epi16(_mm256_maddubs_epi16(x[c], w), ones));
    }
  __m256i s = acc[0];
  for (int c = 1; c < 8; ++c) s = _mm256_add_epi32(s, acc[c]);
  alignas(32) int32_t v[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(v), s);
  return v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
}

}  // namespace phi4mm::peaks_internal
