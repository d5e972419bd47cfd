// Generic float32 convolutions on channels-last data (no model knowledge): a dense 2-D 3x3
// convolution with stride 2 and padding 1, its depthwise (groups = channels) variant, and a causal
// depthwise 1-D convolution. Each mirrors torch.nn.Conv2d / Conv1d with zero padding; the
// summation order may differ from torch's, so results agree to float rounding.
#pragma once

#include <cstdint>

#include "phi4mm/base/thread_pool.h"

namespace phi4mm {

// Output length of a kernel-3, stride-2, padding-1 convolution: floor((n - 1) / 2) + 1.
inline int64_t Stride2Length(int64_t n) { return (n - 1) / 2 + 1; }

// x: [h, w, cin] channels-last; weight: [cout, cin, 3, 3] (torch layout); bias: [cout] or nullptr.
// out: [Stride2Length(h), Stride2Length(w), cout]; out[i,j,o] = bias[o] +
//   Σ_c Σ_{a,b ∈ 0..2} weight[o,c,a,b] · x[2i-1+a, 2j-1+b, c]  (zero outside x).
void Conv2d3x3Stride2(const float* x, int64_t h, int64_t w, int64_t cin, const float* weight, const float* bias,
                      int64_t cout, float* out, ThreadPool* pool);

// Depthwise version (groups = channels): weight [c, 1, 3, 3], bias [c] or nullptr; x [h, w, c];
// out [Stride2Length(h), Stride2Length(w), c], out[i,j,c] = bias[c] + Σ_{a,b} weight[c,a,b]·x[2i-1+a, 2j-1+b, c].
void DepthwiseConv2d3x3Stride2(const float* x, int64_t h, int64_t w, int64_t c, const float* weight,
                               const float* bias, float* out, ThreadPool* pool);

// Causal depthwise 1-D convolution over time: x [t, c], weight [c, 1, k] (torch layout), bias [c]
// or nullptr; out [t, c], out[i,ch] = bias[ch] + Σ_{j<k} weight[ch,j] · x[i - (k-1) + j, ch] (zero
// before the start). Equals torch Conv1d(padding = k-1, groups = c) with its last k-1 outputs dropped.
void CausalDepthwiseConv1d(const float* x, int64_t t, int64_t c, const float* weight, int64_t k, const float* bias,
                           float* out, ThreadPool* pool);

}  // namespace phi4mm
