// AVX-512 VNNI kernels of MeasureMachinePeaks (compiled with the AVX-512 F/BW/VL/VNNI flags; called
// only when an AVX-512 kernel table is active): 12 independent vpdpbusd chains, the instruction of
// that table's Q4_K tile, on ymm (the avx512 table) or zmm (avx512zmm), enough chains to cover
// its latency (5) at two per cycle.
#include <immintrin.h>

#include "phi4mm/kernels/machine_peaks.h"

namespace phi4mm::peaks_internal {

int32_t Int8LoopVnni(int64_t iters, int32_t seed) {
  // In assembly for the same reason as Int8LoopAvx2: compiled from intrinsics, GCC adds a register
  // copy per chain and iteration ("v": any of the 32 registers).
  static_assert(kInt8LoopVnniMacs == 12 * 32, "12 chains of 32 MACs");
  // Named variables, not an array: GCC keeps an array in memory and stores it every iteration.
  __m256i a0 = _mm256_set1_epi32(seed), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0, a8 = a0,
          a9 = a0, a10 = a0, a11 = a0;
  const __m256i x = _mm256_set1_epi8(static_cast<char>(seed | 1)), w = _mm256_set1_epi8(3);
  for (int64_t i = 0; i < iters; ++i)
    __asm__ volatile(
        "vpdpbusd %[w], %[x], %[a0]\n\t vpdpbusd %[w], %[x], %[a1]\n\t"
        "vpdpbusd %[w], %[x], %[a2]\n\t vpdpbusd %[w], %[x], %[a3]\n\t"
        "vpdpbusd %[w], %[x], %[a4]\n\t vpdpbusd %[w], %[x], %[a5]\n\t"
        "vpdpbusd %[w], %[x], %[a6]\n\t vpdpbusd %[w], %[x], %[a7]\n\t"
        "vpdpbusd %[w], %[x], %[a8]\n\t vpdpbusd %[w], %[x], %[a9]\n\t"
        "vpdpbusd %[w], %[x], %[a10]\n\t vpdpbusd %[w], %[x], %[a11]\n\t"
        : [a0] "+v"(a0), [a1] "+v"(a1), [a2] "+v"(a2), [a3] "+v"(a3), [a4] "+v"(a4), [a5] "+v"(a5),
          [a6] "+v"(a6), [a7] "+v"(a7), [a8] "+v"(a8), [a9] "+v"(a9), [a10] "+v"(a10), [a11] "+v"(a11)
        : [x] "v"(x), [w] "v"(w));
  const __m256i s = _mm256_add_epi32(
      _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(a0, a1), _mm256_add_epi32(a2, a3)),
                       _mm256_add_epi32(_mm256_add_epi32(a4, a5), _mm256_add_epi32(a6, a7))),
      _mm256_add_epi32(_mm256_add_epi32(a8, a9), _mm256_add_epi32(a10, a11)));
  alignas(32) int32_t v[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(v), s);
  return v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
}

int32_t Int8LoopVnniZmm(int64_t iters, int32_t seed) {
  static_assert(kInt8LoopVnniZmmMacs == 12 * 64, "12 chains of 64 MACs");
  __m512i a0 = _mm512_set1_epi32(seed), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0, a8 = a0,
          a9 = a0, a10 = a0, a11 = a0;
  const __m512i x = _mm512_set1_epi8(static_cast<char>(seed | 1)), w = _mm512_set1_epi8(3);
  for (int64_t i = 0; i < iters; ++i)
    __asm__ volatile(
        "vpdpbusd %[w], %[x], %[a0]\n\t vpdpbusd %[w], %[x], %[a1]\n\t"
        "vpdpbusd %[w], %[x], %[a2]\n\t vpdpbusd %[w], %[x], %[a3]\n\t"
        "vpdpbusd %[w], %[x], %[a4]\n\t vpdpbusd %[w], %[x], %[a5]\n\t"
        "vpdpbusd %[w], %[x], %[a6]\n\t vpdpbusd %[w], %[x], %[a7]\n\t"
        "vpdpbusd %[w], %[x], %[a8]\n\t vpdpbusd %[w], %[x], %[a9]\n\t"
        "vpdpbusd %[w], %[x], %[a10]\n\t vpdpbusd %[w], %[x], %[a11]\n\t"
        : [a0] "+v"(a0), [a1] "+v"(a1), [a2] "+v"(a2), [a3] "+v"(a3), [a4] "+v"(a4), [a5] "+v"(a5),
          [a6] "+v"(a6), [a7] "+v"(a7), [a8] "+v"(a8), [a9] "+v"(a9), [a10] "+v"(a10), [a11] "+v"(a11)
        : [x] "v"(x), [w] "v"(w));
  const __m512i s = _mm512_add_epi32(
      _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)),
                       _mm512_add_epi32(_mm512_add_epi32(a4, a5), _mm512_add_epi32(a6, a7))),
      _mm512_add_epi32(_mm512_add_epi32(a8, a9), _mm512_add_epi32(a10, a11)));
  alignas(64) int32_t v[16];
  _mm512_store_si512(v, s);
  int32_t t = 0;
  for (int k = 0; k < 16; ++k) t += v[k];
  return t;
}

}  // namespace phi4mm::peaks_internal
