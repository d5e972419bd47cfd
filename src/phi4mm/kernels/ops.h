// Element-wise and row-wise float32 operators used by the models: RMSNorm, LayerNorm, SwiGLU,
// GELU (tanh and exact), bias rows, softmax, rotary embedding. Portable scalar reference versions;
// LayerNorm runs the row of the process's ISA (the Highway source norms_hwy-inl.h compiled for AVX2
// or NEON, sums in double like the scalar row).
#pragma once

#include <cstdint>

#include "phi4mm/base/thread_pool.h"
#include "phi4mm/kernels/isa.h"

namespace phi4mm {

// out[i,:] = w * x[i,:] / sqrt(mean(x[i,:]^2) + eps), for n rows of dim elements (out may be x).
void RmsNorm(const float* x, const float* w, int64_t n, int64_t dim, float eps, float* out);

// out[i,:] = (x[i,:] - mean) / sqrt(var + eps) * w + b for n rows of dim (biased variance, as
// torch.nn.LayerNorm). out may equal x.
void LayerNorm(const float* x, const float* w, const float* b, int64_t n, int64_t dim, float eps, float* out,
               ThreadPool* pool);

namespace ops_internal {
// One LayerNorm row: mean and biased variance summed in double, out[j] = float((x[j] - mean) *
// rstd) * w[j] + b[j] (a product, then a sum: no fused multiply-add). out may equal x.
using LayerNormRowFn = void (*)(const float* x, const float* w, const float* b, int64_t dim, float eps, float* out);
// The row of `isa` (one in AvailableIsas()); scalar: LayerNormRowScalar.
LayerNormRowFn LayerNormRowFor(Isa isa);
void LayerNormRowScalar(const float* x, const float* w, const float* b, int64_t dim, float eps, float* out);
void LayerNormRowAvx2(const float* x, const float* w, const float* b, int64_t dim, float eps, float* out);
void LayerNormRowNeon(const float* x, const float* w, const float* b, int64_t dim, float eps, float* out);
}  // namespace ops_internal

// In place: x = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))  (torch gelu(approximate="tanh")).
void GeluTanhInPlace(float* x, int64_t n);
// In place: x = 0.5·x·(1 + erf(x/√2))  (torch gelu, approximate="none").
void GeluErfInPlace(float* x, int64_t n);

// y[i,:] += bias for n rows of dim.
void AddBiasRows(float* y, const float* bias, int64_t n, int64_t dim);

// gu[n, 2*d] holds [gate | up] per row; out[n, d] = up * silu(gate).
void SiluGateUp(const float* gu, int64_t n, int64_t d, float* out);

// In-place softmax of x[0..n).
void SoftmaxInPlace(float* x, int64_t n);

// Rotary embedding with the "rotate_half" convention on the first rot_dim elements of each of
// n_heads vectors of head_dim at x (stride head_dim): x' = x*cos + rotate_half(x)*sin, where
// cos/sin hold rot_dim values (the half-table repeated twice, as HF builds it).
void ApplyRotary(float* x, int64_t n_heads, int64_t head_dim, int64_t rot_dim, const float* cos,
                 const float* sin);

}  // namespace phi4mm
