// The NEON copy of the gated activation rows (activations_hwy-inl.h compiled for Highway's NEON
// target, the aarch64 baseline): reached through ActivationKernelsFor on the neon and neondot ISAs.
#include "phi4mm/kernels/activations_hwy-inl.h"

namespace phi4mm::activation_internal {

static_assert(HWY_TARGET == HWY_NEON, "activations_neon.cc must compile for Highway's NEON target");

void SiluGateUpRowNeon(const float* g, const float* u, int64_t d, float* out) {
  HWY_NAMESPACE::SiluGateUpRow(g, u, d, out);
}

void GatedSwishRowNeon(const float* value, const float* gate, const float* vb, const float* gb, int64_t d, float* out) {
  HWY_NAMESPACE::GatedSwishRow(value, gate, vb, gb, d, out);
}

void SwishNeon(float* x, int64_t n) { HWY_NAMESPACE::SwishRow(x, n); }

}  // namespace phi4mm::activation_internal
