// Generic float32 operators for Conformer-style encoders (no model knowledge): swish and ReLU in
// place (LayerNorm and GELU are in kernels/ops.h), a gated-swish (GLU) combiner with optional
// per-half biases, and multi-head self-attention with a per-head relative-position additive bias
// and an optional boolean attention mask.
#pragma once

#include <cstdint>

#include "phi4mm/base/thread_pool.h"

namespace phi4mm {

// x = x · σ(x)  (torch SiLU / "swish"), split over `pool` (may be nullptr) in ranges of whole vectors.
void SwishInPlace(float* x, int64_t n, ThreadPool* pool = nullptr);
void ReluInPlace(float* x, int64_t n);

// x [n, 2d] holds [value | gate] per row; out[n, d] = (value + value_bias) · swish(gate + gate_bias).
// Either bias ([d]) may be nullptr. Rows split over `pool` (may be nullptr).
void GatedSwish(const float* x, int64_t n, int64_t d, const float* value_bias, const float* gate_bias, float* out,
                ThreadPool* pool = nullptr);

struct RelBiasAttentionShape {
  int64_t seq = 0;      // L: queries = keys
  int64_t n_heads = 0;  // H
  int64_t head_dim = 0;
  float scale = 1.0f;   // multiplies q·k
};

// out[i, h·d..] = Σ_j softmax_j(scale·q_i·k_j + rel_bias[h, j - i + L - 1]) · v_j over the keys j
// that `allowed` permits. q, k, v, out: [L, H·head_dim]. rel_bias: [H, 2L-1] or nullptr.
// allowed: [L, L] (nonzero = query i may see key j) or nullptr for all; disallowed keys get
// probability exactly 0 (masked_fill -inf, softmax); a row with no allowed key yields zeros.
void RelBiasSelfAttention(const float* q, const float* k, const float* v, const float* rel_bias,
                          const uint8_t* allowed, const RelBiasAttentionShape& shape, float* out, ThreadPool* pool);

}  // namespace phi4mm
