// AVX2 + FMA kernels of MeasureMachinePeaks (compiled with -mavx2 -mfma -mf16c; called only when
// the CPU has them): a streaming read with four independent 256-bit integer adds per 128 bytes, 12
// independent vfmadd231ps chains, and 8 independent vpmaddubsw -> vpaddw chains (the instruction
// mix of the AVX2 Q4_K tile: one multiply per 32 MACs, int16 accumulation); and the whole
// instruction sequence the AVX2 Q8_0 tile issues per (weight row, activation row) and four blocks
// (its per-32 scales leave no room for int16 accumulation, so each product pays a vpmaddwd
// widening, and the sign trick a vpsignb).
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
  // The 8 chains are written in assembly: compiled from intrinsics, GCC merges equal products,
  // hoists them out of the loop or spills the accumulators, and the figure stops being a peak.
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  const __m256i x0 = _mm256_set1_epi8(static_cast<char>(seed)), x1 = _mm256_set1_epi8(static_cast<char>(seed + 1));
  const __m256i w = _mm256_set1_epi8(3);
  for (int64_t i = 0; i < iters; ++i)
    __asm__ volatile(
        "vpmaddubsw %[w], %[x0], %%ymm12\n\t"
        "vpaddw %%ymm12, %[a0], %[a0]\n\t"
        "vpmaddubsw %[w], %[x1], %%ymm13\n\t"
        "vpaddw %%ymm13, %[a1], %[a1]\n\t"
        "vpmaddubsw %[w], %[x0], %%ymm14\n\t"
        "vpaddw %%ymm14, %[a2], %[a2]\n\t"
        "vpmaddubsw %[w], %[x1], %%ymm15\n\t"
        "vpaddw %%ymm15, %[a3], %[a3]\n\t"
        "vpmaddubsw %[w], %[x0], %%ymm12\n\t"
        "vpaddw %%ymm12, %[a4], %[a4]\n\t"
        "vpmaddubsw %[w], %[x1], %%ymm13\n\t"
        "vpaddw %%ymm13, %[a5], %[a5]\n\t"
        "vpmaddubsw %[w], %[x0], %%ymm14\n\t"
        "vpaddw %%ymm14, %[a6], %[a6]\n\t"
        "vpmaddubsw %[w], %[x1], %%ymm15\n\t"
        "vpaddw %%ymm15, %[a7], %[a7]\n\t"
        : [a0] "+x"(a0), [a1] "+x"(a1), [a2] "+x"(a2), [a3] "+x"(a3), [a4] "+x"(a4), [a5] "+x"(a5),
          [a6] "+x"(a6), [a7] "+x"(a7)
        : [x0] "x"(x0), [x1] "x"(x1), [w] "x"(w)
        : "xmm12", "xmm13", "xmm14", "xmm15");
  const __m256i s = _mm256_add_epi16(_mm256_add_epi16(_mm256_add_epi16(a0, a1), _mm256_add_epi16(a2, a3)),
                                     _mm256_add_epi16(_mm256_add_epi16(a4, a5), _mm256_add_epi16(a6, a7)));
  const __m256i s32 = _mm256_madd_epi16(s, _mm256_set1_epi16(1));
  alignas(32) int32_t v[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(v), s32);
  return v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
}

// One (weight row, activation row) pair of the AVX2 Q8_0 tile over four blocks (128 MACs), as
// Q8QuadImpl::Step issues it: per product vector the sign trick (vpsignb), vpmaddubsw and the
// vpmaddwd widening; then two adds and a vphaddd fold the four blocks, one convert, the product of
// the scales and the FMA. The weight-side work (loads, vpabsb, scale unpacking), done once per
// weight row for all the tile's activation rows, is left out.
#define PHI4MM_Q8_PAIR(ACC)                                                                              \
  "vpsignb %[w0], %[x0], %%ymm12\n\t"                                                                    \
  "vpmaddubsw %%ymm12, %[u0], %%ymm12\n\t"                                                               \
  "vpmaddwd %[o], %%ymm12, %%ymm12\n\t"                                                                  \
  "vpsignb %[w1], %[x1], %%ymm13\n\t"                                                                    \
  "vpmaddubsw %%ymm13, %[u1], %%ymm13\n\t"                                                               \
  "vpmaddwd %[o], %%ymm13, %%ymm13\n\t"                                                                  \
  "vpsignb %[w0], %[x1], %%ymm14\n\t"                                                                    \
  "vpmaddubsw %%ymm14, %[u0], %%ymm14\n\t"                                                               \
  "vpmaddwd %[o], %%ymm14, %%ymm14\n\t"                                                                  \
  "vpsignb %[w1], %[x0], %%ymm15\n\t"                                                                    \
  "vpmaddubsw %%ymm15, %[u1], %%ymm15\n\t"                                                               \
  "vpmaddwd %[o], %%ymm15, %%ymm15\n\t"                                                                  \
  "vpaddd %%ymm13, %%ymm12, %%ymm12\n\t"                                                                 \
  "vpaddd %%ymm15, %%ymm14, %%ymm14\n\t"                                                                 \
  "vphaddd %%ymm14, %%ymm12, %%ymm12\n\t"                                                                \
  "vcvtdq2ps %%ymm12, %%ymm12\n\t"                                                                       \
  "vmulps %[s0], %[s1], %%ymm13\n\t"                                                                     \
  "vfmadd231ps %%ymm13, %%ymm12, " ACC "\n\t"

int32_t Int8PairLoopAvx2(int64_t iters, int32_t seed) {
  // Two pairs per iteration (256 MACs) into two float accumulators; the iterations overlap, as
  // only the FMAs carry a dependency from one to the next.
  __m256 c0 = _mm256_setzero_ps(), c1 = c0;
  const __m256i x0 = _mm256_set1_epi8(static_cast<char>(seed)), x1 = _mm256_set1_epi8(static_cast<char>(seed + 1));
  const __m256i w0 = _mm256_set1_epi8(3), w1 = _mm256_set1_epi8(-5);
  const __m256i u0 = _mm256_abs_epi8(w0), u1 = _mm256_abs_epi8(w1), ones = _mm256_set1_epi16(1);
  const __m256 s0 = _mm256_set1_ps(1e-3f), s1 = _mm256_set1_ps(1e-3f);
  for (int64_t i = 0; i < iters; ++i)
    __asm__ volatile(PHI4MM_Q8_PAIR("%[c0]") PHI4MM_Q8_PAIR("%[c1]")
                     : [c0] "+x"(c0), [c1] "+x"(c1)
                     : [x0] "x"(x0), [x1] "x"(x1), [w0] "x"(w0), [w1] "x"(w1), [u0] "x"(u0), [u1] "x"(u1),
                       [o] "x"(ones), [s0] "x"(s0), [s1] "x"(s1)
                     : "xmm12", "xmm13", "xmm14", "xmm15");
  alignas(32) float v[8];
  _mm256_store_ps(v, _mm256_add_ps(c0, c1));
  return static_cast<int32_t>(v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7]);
}

#undef PHI4MM_Q8_PAIR

}  // namespace phi4mm::peaks_internal
