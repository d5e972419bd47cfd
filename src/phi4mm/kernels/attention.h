// Causal grouped-query attention over a key/value cache, float32 (the reference path; fused
// flash-style kernels replace it later behind the same signature).
#pragma once

#include <cstdint>

#include "phi4mm/base/thread_pool.h"

namespace phi4mm {

struct AttentionShape {
  int64_t n_heads = 0;     // query heads
  int64_t n_kv_heads = 0;  // key/value heads; query head h uses kv head h / (n_heads / n_kv_heads)
  int64_t head_dim = 0;
  float scale = 1.0f;      // multiplies q·k
};

// q: [S, n_heads, head_dim] for query positions past..past+S-1.
// k, v: cache rows [past+S, n_kv_heads, head_dim] (row t = position t).
// out: [S, n_heads, head_dim]. Query s attends to positions 0..past+s.
void CausalAttention(const float* q, const float* k, const float* v, int64_t past, int64_t S,
                     const AttentionShape& shape, float* out, ThreadPool* pool);

}  // namespace phi4mm
