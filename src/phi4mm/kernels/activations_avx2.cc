// The AVX2 copy of SiluGateUpRows' row (activations_hwy-inl.h compiled for Highway's AVX2 target;
// this file gets -mavx2 -mfma -mf16c -mbmi -mbmi2): reached through SiluGateUpRowFor on the avx2,
// avxvnni and avx512 ISAs.
#include "phi4mm/kernels/activations_hwy-inl.h"

namespace phi4mm::activation_internal {

static_assert(HWY_TARGET == HWY_AVX2, "activations_avx2.cc must compile for Highway's AVX2 target");

void SiluGateUpRowAvx2(const float* g, const float* u, int64_t d, float* out) {
  HWY_NAMESPACE::SiluGateUpRow(g, u, d, out);
}

}  // namespace phi4mm::activation_internal
