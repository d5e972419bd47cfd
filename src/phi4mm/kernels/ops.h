// Element-wise and row-wise float32 operators used by the models: RMSNorm, LayerNorm, SwiGLU,
// softmax, rotary embedding. Portable scalar reference versions; SIMD versions dispatch here later.
#pragma once

#include <cstdint>

namespace phi4mm {

// out[i,:] = w * x[i,:] / sqrt(mean(x[i,:]^2) + eps), for n rows of dim elements (out may be x).
void RmsNorm(const float* x, const float* w, int64_t n, int64_t dim, float eps, float* out);

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
