// NEON kernels of MeasureMachinePeaks for aarch64 (compiled with -march=armv8-a, the baseline): a
// streaming read with four independent 128-bit adds per 64 bytes, 24 independent fmla chains, and
// 8 independent smlal / smlal2 chains into int16 lanes (the instruction mix of the plain NEON Q4_K
// tile). The int8 chains are assembly so that the compiler cannot merge or hoist them.
#include <arm_neon.h>

#include "phi4mm/kernels/machine_peaks.h"

namespace phi4mm::peaks_internal {

uint64_t ReadSumNeon(const uint8_t* p, size_t n) {
  uint64x2_t a0 = vdupq_n_u64(0), a1 = a0, a2 = a0, a3 = a0;
  const uint64_t* q = reinterpret_cast<const uint64_t*>(p);
  for (size_t i = 0; i + 128 <= n; i += 128, q += 16) {
    a0 = vaddq_u64(a0, vld1q_u64(q));
    a1 = vaddq_u64(a1, vld1q_u64(q + 2));
    a2 = vaddq_u64(a2, vld1q_u64(q + 4));
    a3 = vaddq_u64(a3, vld1q_u64(q + 6));
    a0 = vaddq_u64(a0, vld1q_u64(q + 8));
    a1 = vaddq_u64(a1, vld1q_u64(q + 10));
    a2 = vaddq_u64(a2, vld1q_u64(q + 12));
    a3 = vaddq_u64(a3, vld1q_u64(q + 14));
  }
  return vaddvq_u64(vaddq_u64(vaddq_u64(a0, a1), vaddq_u64(a2, a3)));
}

float FmaLoopNeon(int64_t iters, float seed) {
  float32x4_t acc[24];
  for (int c = 0; c < 24; ++c) acc[c] = vdupq_n_f32(seed + static_cast<float>(c));
  const float32x4_t a = vdupq_n_f32(0.999f), b = vdupq_n_f32(1e-3f);
  for (int64_t i = 0; i < iters; ++i)
    for (int c = 0; c < 24; ++c) acc[c] = vfmaq_f32(b, acc[c], a);
  float32x4_t s = acc[0];
  for (int c = 1; c < 24; ++c) s = vaddq_f32(s, acc[c]);
  return vaddvq_f32(s);
}

int32_t Int8LoopNeon(int64_t iters, int32_t seed) {
  int16x8_t a0 = vdupq_n_s16(0), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  const int8x16_t x0 = vdupq_n_s8(static_cast<int8_t>(seed)), x1 = vdupq_n_s8(static_cast<int8_t>(seed + 1));
  const int8x16_t w = vdupq_n_s8(3);
  for (int64_t i = 0; i < iters; ++i)
    __asm__ volatile(
        "smlal %[a0].8h, %[x0].8b, %[w].8b\n\t"
        "smlal2 %[a1].8h, %[x1].16b, %[w].16b\n\t"
        "smlal %[a2].8h, %[x1].8b, %[w].8b\n\t"
        "smlal2 %[a3].8h, %[x0].16b, %[w].16b\n\t"
        "smlal %[a4].8h, %[x0].8b, %[w].8b\n\t"
        "smlal2 %[a5].8h, %[x1].16b, %[w].16b\n\t"
        "smlal %[a6].8h, %[x1].8b, %[w].8b\n\t"
        "smlal2 %[a7].8h, %[x0].16b, %[w].16b\n\t"
        "smlal2 %[a0].8h, %[x1].16b, %[w].16b\n\t"
        "smlal %[a1].8h, %[x0].8b, %[w].8b\n\t"
        "smlal2 %[a2].8h, %[x0].16b, %[w].16b\n\t"
        "smlal %[a3].8h, %[x1].8b, %[w].8b\n\t"
        "smlal2 %[a4].8h, %[x1].16b, %[w].16b\n\t"
        "smlal %[a5].8h, %[x0].8b, %[w].8b\n\t"
        "smlal2 %[a6].8h, %[x0].16b, %[w].16b\n\t"
        "smlal %[a7].8h, %[x1].8b, %[w].8b\n\t"
        : [a0] "+w"(a0), [a1] "+w"(a1), [a2] "+w"(a2), [a3] "+w"(a3), [a4] "+w"(a4), [a5] "+w"(a5),
          [a6] "+w"(a6), [a7] "+w"(a7)
        : [x0] "w"(x0), [x1] "w"(x1), [w] "w"(w));
  const int16x8_t s = vaddq_s16(vaddq_s16(vaddq_s16(a0, a1), vaddq_s16(a2, a3)),
                                vaddq_s16(vaddq_s16(a4, a5), vaddq_s16(a6, a7)));
  return vaddlvq_s16(s);
}

}  // namespace phi4mm::peaks_internal
