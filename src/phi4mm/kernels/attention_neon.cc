// The NEON copy of CausalAttention's row kernels (attention_hwy-inl.h compiled for Highway's NEON
// target, the aarch64 baseline): reached only through RowKernelsFor (attention.cc) on the neon and
// neondot ISAs.
#include "phi4mm/kernels/attention_hwy-inl.h"

namespace phi4mm::attention_internal {

static_assert(HWY_TARGET == HWY_NEON, "attention_neon.cc must compile for Highway's NEON target");

const RowKernels& NeonRowKernels() { return HWY_NAMESPACE::Table(); }

}  // namespace phi4mm::attention_internal
