// Generic float32 operators for vision transformers (no model knowledge): bidirectional multi-head
// attention over a batch of sequences with a per-key validity mask, 2x2 average pooling of
// channels-last feature maps with optional right/bottom reflection padding for odd sizes, and the
// row-parallel bias / tanh-GELU / residual steps of an encoder layer. Each has a scalar reference;
// attention and GELU run the table of the process's ISA (kernels/isa.h): the Highway source
// vision_ops_hwy-inl.h compiled for AVX2 (vision_ops_avx2.cc) on the x86 SIMD ISAs and for NEON
// (vision_ops_neon.cc) on aarch64, the scalar ones otherwise.
// (LayerNorm and the scalar GELUs are in kernels/ops.h.)
#pragma once

#include <cstdint>

#include "phi4mm/base/thread_pool.h"
#include "phi4mm/kernels/isa.h"
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
// The scalar reference of BidirectionalAttention (materialised scores, double accumulation).
void BidirectionalAttentionReference(const float* q, const float* k, const float* v, const uint8_t* key_valid,
                                     const BatchAttentionShape& shape, float* out, ThreadPool* pool);

// y[i,:] += bias for n rows of dim, rows split over `pool` (may be nullptr).
void AddBiasParallel(float* y, const float* bias, int64_t n, int64_t dim, ThreadPool* pool);
// y[i,j] = gelu_tanh(y[i,j] + bias[j]) (torch gelu(approximate="tanh") after the linear's bias).
void AddBiasGeluTanh(float* y, const float* bias, int64_t n, int64_t dim, ThreadPool* pool);
// h[i,j] += y[i,j] + bias[j]: a linear's bias and the residual connection, in that order.
void AddBiasResidual(float* h, const float* y, const float* bias, int64_t n, int64_t dim, ThreadPool* pool);

// x: [batch, h, w, c] channels-last. When h or w is odd the map is first padded by one row at the
// bottom / one column at the right by reflection (torch ReflectionPad2d((0,1,0,1)) on that side).
// out: [batch, ceil(h/2), ceil(w/2), c], each the mean ((a+b)+c)+d)/4 of its 2x2 block, in that
// summation order (row-major within the block).
void AvgPool2x2(const float* x, int64_t batch, int64_t h, int64_t w, int64_t c, float* out, ThreadPool* pool);

namespace vision_internal {
// The kernels behind BidirectionalAttention and AddBiasGeluTanh, one table per ISA.
struct VisionKernels {
  void (*attention)(const float* q, const float* k, const float* v, const uint8_t* key_valid,
                    const BatchAttentionShape& shape, float* out, ThreadPool* pool);
  // In place tanh-GELU of x[0..n).
  void (*gelu_tanh)(float* x, int64_t n);
};
// The table of `isa` (one in AvailableIsas()); scalar: the reference attention and GeluTanhInPlace.
const VisionKernels& VisionKernelsFor(Isa isa);
// The AVX2 + FMA kernels (vision_ops_avx2.cc, x86-64 builds only), reached through VisionKernelsFor.
void BidirectionalAttentionAvx2(const float* q, const float* k, const float* v, const uint8_t* key_valid,
                                const BatchAttentionShape& shape, float* out, ThreadPool* pool);
// In place tanh-GELU of x[0..n) (the scalar GeluTanhInPlace for the tail).
void GeluTanhAvx2(float* x, int64_t n);
// The NEON kernels (vision_ops_neon.cc, aarch64 builds only), the same contract as the AVX2 pair.
void BidirectionalAttentionNeon(const float* q, const float* k, const float* v, const uint8_t* key_valid,
                                const BatchAttentionShape& shape, float* out, ThreadPool* pool);
void GeluTanhNeon(float* x, int64_t n);
}  // namespace vision_internal

}  // namespace phi4mm
