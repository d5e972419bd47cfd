// The AVX-VNNI int8 loop of MeasureMachinePeaks (compiled with -mavx2 -mavxvnni; called only when
// the avxvnni table runs in VEX encoding): 12 independent ymm vpdpbusd chains, the instruction of
// that table's Q4_K and Q8_0 tiles, as Int8LoopVnni times them in EVEX encoding. VEX addresses 16
// registers: the 12 chains and the two operands fit.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "phi4mm/kernels/machine_peaks.h"

namespace phi4mm::peaks_internal {

int32_t Int8LoopAvxVnni(int64_t iters, int32_t seed) {
  static_assert(kInt8LoopVnniMacs == 12 * 32, "12 chains of 32 MACs");
  // In assembly for the same reason as Int8LoopAvx2 (GCC adds a register copy per chain and
  // iteration); named variables, not an array, which GCC would keep in memory. "x": ymm0-15.
  __m256i a0 = _mm256_set1_epi32(seed), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0,
          a8 = a0, a9 = a0, a10 = a0, a11 = a0;
  const __m256i x = _mm256_set1_epi8(static_cast<char>(seed | 1)), w = _mm256_set1_epi8(3);
  for (int64_t i = 0; i < iters; ++i)
    __asm__ volatile(
        "%{vex%} vpdpbusd %[w], %[x], %[a0]\n\t %{vex%} vpdpbusd %[w], %[x], %[a1]\n\t"
        "%{vex%} vpdpbusd %[w], %[x], %[a2]\n\t %{vex%} vpdpbusd %[w], %[x], %[a3]\n\t"
        "%{vex%} vpdpbusd %[w], %[x], %[a4]\n\t %{vex%} vpdpbusd %[w], %[x], %[a5]\n\t"
        "%{vex%} vpdpbusd %[w], %[x], %[a6]\n\t %{vex%} vpdpbusd %[w], %[x], %[a7]\n\t"
        "%{vex%} vpdpbusd %[w], %[x], %[a8]\n\t %{vex%} vpdpbusd %[w], %[x], %[a9]\n\t"
        "%{vex%} vpdpbusd %[w], %[x], %[a10]\n\t %{vex%} vpdpbusd %[w], %[x], %[a11]\n\t"
        : [a0] "+x"(a0), [a1] "+x"(a1), [a2] "+x"(a2), [a3] "+x"(a3), [a4] "+x"(a4), [a5] "+x"(a5),
          [a6] "+x"(a6), [a7] "+x"(a7), [a8] "+x"(a8), [a9] "+x"(a9), [a10] "+x"(a10), [a11] "+x"(a11)
        : [x] "x"(x), [w] "x"(w));
  // Every lane of every chain, summed (wrapping) so that none of the work is dead.
  const __m256i all[12] = {a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11};
  uint32_t lanes[sizeof(all) / 4];
  std::memcpy(lanes, all, sizeof(all));
  uint32_t t = 0;
  for (uint32_t l : lanes) t += l;
  return static_cast<int32_t>(t);
}

}  // namespace phi4mm::peaks_internal
