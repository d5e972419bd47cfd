// The NEON copy of the vision operators' kernels (vision_ops_hwy-inl.h compiled for Highway's NEON
// target, the aarch64 baseline): reached only through VisionKernelsFor (vision_ops.cc) on the neon
// and neondot ISAs.
#include "phi4mm/kernels/vision_ops_hwy-inl.h"

namespace phi4mm::vision_internal {

static_assert(HWY_TARGET == HWY_NEON, "vision_ops_neon.cc must compile for Highway's NEON target");

void BidirectionalAttentionNeon(const float* q, const float* k, const float* v, const uint8_t* key_valid,
                                const BatchAttentionShape& s, float* out, ThreadPool* pool) {
  HWY_NAMESPACE::BidirectionalAttention(q, k, v, key_valid, s, out, pool);
}

void GeluTanhNeon(float* x, int64_t n) { HWY_NAMESPACE::GeluTanh(x, n); }

}  // namespace phi4mm::vision_internal
