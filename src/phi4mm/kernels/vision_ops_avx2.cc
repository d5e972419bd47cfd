// The AVX2 copy of the vision operators' kernels (vision_ops_hwy-inl.h compiled for Highway's AVX2
// target; this file gets -mavx2 -mfma -mf16c -mbmi -mbmi2): reached only through VisionKernelsFor
// (vision_ops.cc) on the avx2, avxvnni and avx512 ISAs.
#include "phi4mm/kernels/vision_ops_hwy-inl.h"

namespace phi4mm::vision_internal {

static_assert(HWY_TARGET == HWY_AVX2, "vision_ops_avx2.cc must compile for Highway's AVX2 target");

void BidirectionalAttentionAvx2(const float* q, const float* k, const float* v, const uint8_t* key_valid,
                                const BatchAttentionShape& s, float* out, ThreadPool* pool) {
  HWY_NAMESPACE::BidirectionalAttention(q, k, v, key_valid, s, out, pool);
}

void GeluTanhAvx2(float* x, int64_t n) { HWY_NAMESPACE::GeluTanh(x, n); }

}  // namespace phi4mm::vision_internal
