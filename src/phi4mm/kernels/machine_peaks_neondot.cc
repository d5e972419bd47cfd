// The dot-product int8 loop of MeasureMachinePeaks (compiled with -march=armv8.2-a+dotprod; run
// only when the process's ISA is neondot): 8 independent sdot chains, 16 multiply-adds each per
// iteration, in assembly so that the compiler cannot merge or hoist them.
#include <arm_neon.h>

#include "phi4mm/kernels/machine_peaks.h"

namespace phi4mm::peaks_internal {

int32_t Int8LoopNeonDot(int64_t iters, int32_t seed) {
  int32x4_t a0 = vdupq_n_s32(0), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  const int8x16_t x0 = vdupq_n_s8(static_cast<int8_t>(seed)), x1 = vdupq_n_s8(static_cast<int8_t>(seed + 1));
  const int8x16_t w = vdupq_n_s8(3);
  for (int64_t i = 0; i < iters; ++i)
    __asm__ volatile(
        "sdot %[a0].4s, %[x0].16b, %[w].16b\n\t"
        "sdot %[a1].4s, %[x1].16b, %[w].16b\n\t"
        "sdot %[a2].4s, %[x0].16b, %[w].16b\n\t"
        "sdot %[a3].4s, %[x1].16b, %[w].16b\n\t"
        "sdot %[a4].4s, %[x0].16b, %[w].16b\n\t"
        "sdot %[a5].4s, %[x1].16b, %[w].16b\n\t"
        "sdot %[a6].4s, %[x0].16b, %[w].16b\n\t"
        "sdot %[a7].4s, %[x1].16b, %[w].16b\n\t"
        : [a0] "+w"(a0), [a1] "+w"(a1), [a2] "+w"(a2), [a3] "+w"(a3), [a4] "+w"(a4), [a5] "+w"(a5),
          [a6] "+w"(a6), [a7] "+w"(a7)
        : [x0] "w"(x0), [x1] "w"(x1), [w] "w"(w));
  const int32x4_t s = vaddq_s32(vaddq_s32(vaddq_s32(a0, a1), vaddq_s32(a2, a3)),
                                vaddq_s32(vaddq_s32(a4, a5), vaddq_s32(a6, a7)));
  return vaddvq_s32(s);
}

}  // namespace phi4mm::peaks_internal
