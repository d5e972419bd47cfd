// NEON row of SiluGateUpRows (aarch64 baseline; reached through SiluGateUpRowFor on the neon and
// neondot ISAs): 4 columns at a time, exp(-g) by neon_exp.h's Exp.
#include <arm_neon.h>

#include "phi4mm/kernels/activations.h"
#include "phi4mm/kernels/neon_exp.h"

namespace phi4mm::activation_internal {

void SiluGateUpRowNeon(const float* g, const float* u, int64_t d, float* out) {
  const float32x4_t one = vdupq_n_f32(1.0f);
  int64_t j = 0;
  for (; j + 4 <= d; j += 4) {
    const float32x4_t gv = vld1q_f32(g + j);
    const float32x4_t e = neon::Exp(vnegq_f32(gv));
    vst1q_f32(out + j, vmulq_f32(vld1q_f32(u + j), vdivq_f32(gv, vaddq_f32(one, e))));
  }
  if (j < d) SiluGateUpRowScalar(g + j, u + j, d - j, out + j);
}

}  // namespace phi4mm::activation_internal
