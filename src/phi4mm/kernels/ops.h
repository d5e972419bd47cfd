// Element-wise and row-wise float32 operators used by the models: RMSNorm, LayerNorm, SwiGLU,
// GELU (tanh and exact), bias rows, softmax, rotary embedding. Portable scalar reference versions; SIMD versions dispatch here later.
#pragma once

#include <cstdint>

#include "phi4mm/base/thread_pool.h"

namespace phi4mm {

// out[i,:] = w * x[i,:] / sqrt(mean(x[i,:]^2) + eps), for n rows of dim elements (out may be x).
void RmsNorm(const float* x, const float* w, int64_t n, int64_t dim, float eps, float* out);

// out[i,:] = (x[i,:] - mean) / sqrt(var + eps) * w + b for n rows of dim (biased variance, as
// torch.nn.LayerNorm). out may equal x.
void LayerNorm(const float* x, const float* w, const float* b, int64_t n, int64_t dim, float eps, float* out,
               ThreadPool* pool);

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
