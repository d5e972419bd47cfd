// The NEON copy of LayerNorm's row (norms_hwy-inl.h compiled for Highway's NEON target, the
// aarch64 baseline): reached through LayerNormRowFor (ops.cc) on the neon and neondot ISAs.
#include "phi4mm/kernels/norms_hwy-inl.h"

namespace phi4mm::ops_internal {

static_assert(HWY_TARGET == HWY_NEON, "norms_neon.cc must compile for Highway's NEON target");

void LayerNormRowNeon(const float* x, const float* w, const float* b, int64_t dim, float eps, float* out) {
  HWY_NAMESPACE::LayerNormRow(x, w, b, dim, eps, out);
}

}  // namespace phi4mm::ops_internal
