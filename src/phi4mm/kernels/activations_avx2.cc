// The AVX2 copy of the gated activation rows (activations_hwy-inl.h compiled for Highway's AVX2
// target; this file gets -mavx2 -mfma -mf16c -mbmi -mbmi2): reached through ActivationKernelsFor
// on the avx2, avxvnni and avx512 ISAs.
#include "phi4mm/kernels/activations_hwy-inl.h"

namespace phi4mm::activation_internal {

static_assert(HWY_TARGET == HWY_AVX2, "activations_avx2.cc must compile for Highway's AVX2 target");

void SiluGateUpRowAvx2(const float* g, const float* u, int64_t d, float* out) {
  HWY_NAMESPACE::SiluGateUpRow(g, u, d, out);
}

void GatedSwishRowAvx2(const float* value, const float* gate, const float* vb, const float* gb, int64_t d, float* out) {
  HWY_NAMESPACE::GatedSwishRow(value, gate, vb, gb, d, out);
}

void SwishAvx2(float* x, int64_t n) { HWY_NAMESPACE::SwishRow(x, n); }

}  // namespace phi4mm::activation_internal
