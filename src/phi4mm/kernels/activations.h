// The gated activation of a SwiGLU MLP (no model knowledge): out = up * silu(gate) over rows that
// hold [gate | up], split over a thread pool by rows. Each row runs the table of the process's ISA
// (kernels/isa.h): AVX2 (activations_avx2.cc) on the x86 SIMD ISAs, NEON (activations_neon.cc) on
// aarch64, the scalar loop of ops.h's SiluGateUp otherwise. A row's result does not depend on the
// other rows or on the thread that computes it (what a batched decoder step needs).
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
// The table of `isa` (one in AvailableIsas()); scalar: SiluGateUpRowScalar.
SiluGateUpRowFn SiluGateUpRowFor(Isa isa);
// The scalar reference, the same expression as ops.h's SiluGateUp.
void SiluGateUpRowScalar(const float* g, const float* u, int64_t d, float* out);
// exp(-g) as avx2_exp.h's / neon_exp.h's 2^(-g·log2 e); the last d % 8 (d % 4) by the scalar row.
void SiluGateUpRowAvx2(const float* g, const float* u, int64_t d, float* out);
void SiluGateUpRowNeon(const float* g, const float* u, int64_t d, float* out);
}  // namespace activation_internal

}  // namespace phi4mm
