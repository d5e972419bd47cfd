// SiluGateUpRows, the gated swish and swish: the scalar rows, the per-ISA tables and the split over
// rows.
#include "phi4mm/kernels/activations.h"

#include <cmath>

namespace phi4mm {

namespace activation_internal {

void SiluGateUpRowScalar(const float* g, const float* u, int64_t d, float* out) {
  for (int64_t j = 0; j < d; ++j) out[j] = u[j] * (g[j] / (1.0f + std::exp(-g[j])));
}

void GatedSwishRowScalar(const float* value, const float* gate, const float* vb, const float* gb, int64_t d,
                         float* out) {
  for (int64_t j = 0; j < d; ++j) {
    const float g = gate[j] + (gb ? gb[j] : 0.0f);
    out[j] = (value[j] + (vb ? vb[j] : 0.0f)) * (g / (1.0f + std::exp(-g)));
  }
}

void SwishScalar(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] / (1.0f + std::exp(-x[i]));
}

const ActivationKernels& ActivationKernelsFor(Isa isa) {
  static const ActivationKernels scalar{&SiluGateUpRowScalar, &GatedSwishRowScalar, &SwishScalar};
#if defined(PHI4MM_BUILD_X86_KERNELS)
  static const ActivationKernels avx2{&SiluGateUpRowAvx2, &GatedSwishRowAvx2, &SwishAvx2};
  if (FloatKernelIsa(isa) == Isa::kAvx2) return avx2;
#endif
#if defined(PHI4MM_BUILD_ARM_KERNELS)
  static const ActivationKernels neon{&SiluGateUpRowNeon, &GatedSwishRowNeon, &SwishNeon};
  if (FloatKernelIsa(isa) == Isa::kNeon) return neon;
#endif
  (void)isa;
  return scalar;
}

}  // namespace activation_internal

void SiluGateUpRows(const float* gu, int64_t n, int64_t d, float* out, ThreadPool* pool) {
  static const activation_internal::SiluGateUpRowFn row = activation_internal::ActivationKernelsFor(ActiveIsa()).silu_gate_up_row;
  auto body = [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) row(gu + i * 2 * d, gu + i * 2 * d + d, d, out + i * d);
  };
  // A row of the decoder's width (8192) is ~1 µs of vector work: split only a few rows per thread.
  if (pool != nullptr) pool->ParallelFor(n, body, 2);
  else body(0, n);
}

}  // namespace phi4mm
