// The gated activations of the models' MLPs (no model knowledge), one table per ISA (kernels/isa.h):
// the SwiGLU of the decoder (out = up * silu(gate) over rows that hold [gate | up], split over a
// thread pool by rows), and the speech encoder's gated swish (GLU) and swish. Each runs the row of
// the process's ISA: the Highway source activations_hwy-inl.h compiled for AVX2 on the x86 SIMD
// ISAs (activations_avx2.cc) and for NEON on aarch64 (activations_neon.cc), the scalar loops
// otherwise. A row's result does not depend on the other rows or on the thread that computes it
// (what a batched decoder step needs).
#pragma once

#include <cstdint>

#include "phi4mm/base/thread_pool.h"
#include "phi4mm/kernels/isa.h"

namespace phi4mm {

// gu[n, 2*d] holds [gate | up] per row; out[n, d] = up * gate / (1 + exp(-gate)). pool may be nullptr.
void SiluGateUpRows(const float* gu, int64_t n, int64_t d, float* out, ThreadPool* pool);

namespace activation_internal {
// One row: out[j] = u[j] * g[j] / (1 + exp(-g[j])), j < d.
using SiluGateUpRowFn = void (*)(const float* g, const float* u, int64_t d, float* out);
// The scalar reference, the same expression as ops.h's SiluGateUp.
void SiluGateUpRowScalar(const float* g, const float* u, int64_t d, float* out);
// exp(-g) as exp_hwy-inl.h's Exp; the last d % 8 (d % 4) by the scalar row.
void SiluGateUpRowAvx2(const float* g, const float* u, int64_t d, float* out);
void SiluGateUpRowNeon(const float* g, const float* u, int64_t d, float* out);

// One row of the gated swish: out[j] = (value[j] + vb[j]) * swish(gate[j] + gb[j]), swish(x) =
// x / (1 + exp(-x)), j < d; vb and gb may be nullptr (no bias).
using GatedSwishRowFn = void (*)(const float* value, const float* gate, const float* vb, const float* gb, int64_t d,
                                 float* out);
// x[i] = swish(x[i]) for i < n.
using SwishFn = void (*)(float* x, int64_t n);
// The three rows of `isa` (one in AvailableIsas()); scalar: the *Scalar functions.
struct ActivationKernels {
  SiluGateUpRowFn silu_gate_up_row;
  GatedSwishRowFn gated_swish_row;
  SwishFn swish;
};
const ActivationKernels& ActivationKernelsFor(Isa isa);
// The scalar references (speech_ops.h's GatedSwish and SwishInPlace on the scalar ISA).
void GatedSwishRowScalar(const float* value, const float* gate, const float* vb, const float* gb, int64_t d,
                         float* out);
void SwishScalar(float* x, int64_t n);
void GatedSwishRowAvx2(const float* value, const float* gate, const float* vb, const float* gb, int64_t d, float* out);
void SwishAvx2(float* x, int64_t n);
void GatedSwishRowNeon(const float* value, const float* gate, const float* vb, const float* gb, int64_t d, float* out);
void SwishNeon(float* x, int64_t n);
}  // namespace activation_internal

}  // namespace phi4mm
