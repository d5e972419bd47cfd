// Generic float32 operators for vision transformers (no model knowledge): affine LayerNorm, the
// tanh-approximated and exact (erf) GELU, per-row bias addition, bidirectional multi-head
// attention over a batch of sequences with a per-key validity mask, and 2x2 average pooling of
// channels-last feature maps with optional right/bottom reflection padding for odd sizes.
#pragma once

#include <cstdint>

#include "phi4mm/base/thread_pool.h"

namespace phi4mm {

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

struct BatchAttentionShape {
  int64_t batch = 0;     // independent sequences
  int64_t seq = 0;       // positions per sequence
  int64_t n_heads = 0;
  int64_t head_dim = 0;
  float scale = 1.0f;    // multiplies q·k
};

// Bidirectional attention within each sequence. q, k, v, out: [batch, seq, n_heads*head_dim].
// key_valid: [batch, seq] (nonzero = the key may be attended) or nullptr for all valid. Every
// query row is computed, masked or not. A sequence with no valid key attends uniformly to all of
// its keys (what an additive finfo.min mask gives after softmax).
void BidirectionalAttention(const float* q, const float* k, const float* v, const uint8_t* key_valid,
                            const BatchAttentionShape& shape, float* out, ThreadPool* pool);

// x: [batch, h, w, c] channels-last. When h or w is odd the map is first padded by one row at the
// bottom / one column at the right by reflection (torch ReflectionPad2d((0,1,0,1)) on that side).
// out: [batch, ceil(h/2), ceil(w/2), c], each the mean ((a+b)+c)+d)/4 of its 2x2 block, in that
// summation order (row-major within the block).
void AvgPool2x2(const float* x, int64_t batch, int64_t h, int64_t w, int64_t c, float* out, ThreadPool* pool);

}  // namespace phi4mm
