// Generic float32 operators for vision transformers (no model knowledge): bidirectional multi-head
// attention over a batch of sequences with a per-key validity mask, and 2x2 average pooling of
// channels-last feature maps with optional right/bottom reflection padding for odd sizes. (LayerNorm,
// GELU and bias rows are in kernels/ops.h.)
#pragma once

#include <cstdint>

#include "phi4mm/base/thread_pool.h"
#include "phi4mm/kernels/ops.h"

namespace phi4mm {

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
