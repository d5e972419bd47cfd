// One IEEE half to float inside the Highway kernels (the tails of rows whose width is not a whole
// number of vectors): vcvtph2ps / fcvtl on a one-lane vector, inline. Calling base/half.h's
// F16ToF32 there instead is an out-of-line call, around which the tiles spill every accumulator
// (the AVX2 f16 matmul tile: 675 stack accesses instead of 34). Internal linkage: include only
// from the *_hwy-inl.h kernel sources.
#pragma once

#include <hwy/highway.h>

#include <cstdint>
#include <cstring>

HWY_BEFORE_NAMESPACE();
namespace phi4mm::HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;

HWY_INLINE float HalfToFloat(uint16_t h) {
  const hn::CappedTag<float, 1> d1;
  const hn::Rebind<hwy::float16_t, decltype(d1)> dh1;
  hwy::float16_t x;
  std::memcpy(&x, &h, sizeof(h));
  return hn::GetLane(hn::PromoteTo(d1, hn::LoadU(dh1, &x)));
}

}  // namespace
}  // namespace phi4mm::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();
