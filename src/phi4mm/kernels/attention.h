// Causal grouped-query attention over a key/value cache stored as float32 or IEEE half. The query
// heads that share a key/value head are computed together, so every cached K and V row is read
// once per group; half rows are widened on the fly (F16C when the CPU has it). When there are
// fewer (position, group) items than threads have work for — decode — the cached length is split
// over threads and the partial softmax sums are merged exactly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "phi4mm/base/thread_pool.h"

namespace phi4mm {

// Element type of a KV cache.
enum class KvDType { kF32, kF16 };
const char* KvDTypeName(KvDType d);
// Accepts "f32" and "f16".
std::optional<KvDType> ParseKvDType(std::string_view s);
inline size_t KvDTypeBytes(KvDType d) { return d == KvDType::kF16 ? 2 : 4; }

struct AttentionShape {
  int64_t n_heads = 0;     // query heads
  int64_t n_kv_heads = 0;  // key/value heads; query head h uses kv head h / (n_heads / n_kv_heads)
  int64_t head_dim = 0;
  float scale = 1.0f;      // multiplies q·k
};

// Cached keys and values, rows [positions, n_kv_heads, head_dim] of `dtype` elements.
struct KvView {
  const void* k = nullptr;
  const void* v = nullptr;
  KvDType dtype = KvDType::kF32;
};

// q: [S, n_heads, head_dim] for query positions past..past+S-1.
// kv: cache rows [past+S, n_kv_heads, head_dim] (row t = position t).
// out: [S, n_heads, head_dim]. Query s attends to positions 0..past+s.
void CausalAttention(const float* q, const KvView& kv, int64_t past, int64_t S, const AttentionShape& shape,
                     float* out, ThreadPool* pool);
// The float32 cache form of the above.
void CausalAttention(const float* q, const float* k, const float* v, int64_t past, int64_t S,
                     const AttentionShape& shape, float* out, ThreadPool* pool);

// out[i] = x[i] rounded to IEEE half (round to nearest even), i < n.
void F32ToF16Row(const float* x, int64_t n, uint16_t* out);

namespace attention_internal {

// Row kernels behind CausalAttention, one table per instruction set. For G query heads of one
// group (q: G rows of hd floats) and `len` cached rows `stride` elements apart:
//   scores: s[g * len + t] = scale * dot(q_g, k_t)
//   accum:  out[g * hd + d] += sum_t p[g * ldp + t] * v_t[d]
struct RowKernels {
  void (*scores_f32)(const float* q, int G, const float* k, int64_t stride, int64_t len, int64_t hd, float scale,
                     float* s);
  void (*scores_f16)(const float* q, int G, const uint16_t* k, int64_t stride, int64_t len, int64_t hd,
                     float scale, float* s);
  void (*accum_f32)(const float* p, int64_t ldp, int G, const float* v, int64_t stride, int64_t len, int64_t hd,
                    float* out);
  void (*accum_f16)(const float* p, int64_t ldp, int G, const uint16_t* v, int64_t stride, int64_t len,
                    int64_t hd, float* out);
  void (*to_f16)(const float* x, int64_t n, uint16_t* out);
};

const RowKernels& ScalarRowKernels();
// Only call when the CPU has AVX2, FMA and F16C.
const RowKernels& Avx2RowKernels();
// The table for this CPU.
const RowKernels& ActiveRowKernels();

}  // namespace attention_internal

}  // namespace phi4mm
