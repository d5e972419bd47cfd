// The AVX2 copy of LayerNorm's row (norms_hwy-inl.h compiled for Highway's AVX2 target; this file
// gets -mavx2 -mfma -mf16c -mbmi -mbmi2): reached through LayerNormRowFor (ops.cc) on the avx2,
// avxvnni and avx512 ISAs.
#include "phi4mm/kernels/norms_hwy-inl.h"

namespace phi4mm::ops_internal {

static_assert(HWY_TARGET == HWY_AVX2, "norms_avx2.cc must compile for Highway's AVX2 target");

void LayerNormRowAvx2(const float* x, const float* w, const float* b, int64_t dim, float eps, float* out) {
  HWY_NAMESPACE::LayerNormRow(x, w, b, dim, eps, out);
}

}  // namespace phi4mm::ops_internal
