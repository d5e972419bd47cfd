// The AVX2 copy of CausalAttention's row kernels (attention_hwy-inl.h compiled for Highway's AVX2
// target; this file gets -mavx2 -mfma -mf16c -mbmi -mbmi2): reached only through RowKernelsFor
// (attention.cc) on the avx2, avxvnni and avx512 ISAs.
#include "phi4mm/kernels/attention_hwy-inl.h"

namespace phi4mm::attention_internal {

static_assert(HWY_TARGET == HWY_AVX2, "attention_avx2.cc must compile for Highway's AVX2 target");

const RowKernels& Avx2RowKernels() { return HWY_NAMESPACE::Table(); }

}  // namespace phi4mm::attention_internal
