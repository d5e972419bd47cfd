// AVX-512 VNNI kernels of MeasureMachinePeaks (compiled with the AVX-512 F/BW/VL/VNNI flags; called
// only when an AVX-512 kernel table is active): 12 independent vpdpbusd chains, the instruction of
// that table's Q4_K tile, on ymm (the avx512 table) or zmm (avx512zmm), enough chains to cover
// its latency (5) at two per cycle.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "phi4mm/kernels/machine_peaks.h"

namespace phi4mm::peaks_internal {

namespace {

// The register width of the chains: ymm (the avx512 table's Q4_K tile) or zmm (avx512zmm's).
struct Ymm {
  using V = __m256i;
  static V Splat32(int32_t s) { return _mm256_set1_epi32(s); }
  static V Splat8(char c) { return _mm256_set1_epi8(c); }
};
struct Zmm {
  using V = __m512i;
  static V Splat32(int32_t s) { return _mm512_set1_epi32(s); }
  static V Splat8(char c) { return _mm512_set1_epi8(c); }
};

template <class W>
int32_t VnniChains(int64_t iters, int32_t seed) {
  using V = typename W::V;
  // In assembly for the same reason as Int8LoopAvx2: compiled from intrinsics, GCC adds a register
  // copy per chain and iteration ("v": any of the 32 registers).
  // Named variables, not an array: GCC keeps an array in memory and stores it every iteration.
  V a0 = W::Splat32(seed), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0, a8 = a0, a9 = a0,
    a10 = a0, a11 = a0;
  const V x = W::Splat8(static_cast<char>(seed | 1)), w = W::Splat8(3);
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
  // Every lane of every chain, summed (wrapping) so that none of the work is dead.
  const V all[12] = {a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11};
  uint32_t lanes[sizeof(all) / 4];
  std::memcpy(lanes, all, sizeof(all));
  uint32_t t = 0;
  for (uint32_t l : lanes) t += l;
  return static_cast<int32_t>(t);
}

}  // namespace

int32_t Int8LoopVnni(int64_t iters, int32_t seed) {
  static_assert(kInt8LoopVnniMacs == 12 * 32, "12 chains of 32 MACs");
  return VnniChains<Ymm>(iters, seed);
}

int32_t Int8LoopVnniZmm(int64_t iters, int32_t seed) {
  static_assert(kInt8LoopVnniZmmMacs == 12 * 64, "12 chains of 64 MACs");
  return VnniChains<Zmm>(iters, seed);
}

}  // namespace phi4mm::peaks_internal
