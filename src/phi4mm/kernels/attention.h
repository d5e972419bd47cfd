// Causal grouped-query attention over a key/value cache stored as float32, IEEE half or 8-bit
// (int8 per head row with a float scale). The query heads that share a key/value head are
// computed together, so every cached K and V row is read once per group. Prefill is flash-style:
// a block of query positions (times the G heads of a group) meets the cached keys one tile at a
// time — the tile is widened to float32 once and shared by all those query rows — with an online
// softmax (running max and sum) and causal masking on the diagonal tiles. Decode (few query rows)
// walks the cached rows directly, widening them as they are loaded, and when there are fewer
// (position, group) items than threads the cached length is split over threads and the partial
// softmax sums are merged exactly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "phi4mm/base/thread_pool.h"
#include "phi4mm/kernels/isa.h"

namespace phi4mm {

// Element type of a KV cache. kQ8: each head's row of head_dim values is stored as int8 round(x /
// s) with s = max|x| / 127, followed by the float s (head_dim + 4 bytes per head).
enum class KvDType { kF32, kF16, kQ8 };
const char* KvDTypeName(KvDType d);
// Accepts "f32", "f16" and "q8".
std::optional<KvDType> ParseKvDType(std::string_view s);
// Bytes one head's part of one position takes: head_dim elements (plus its kQ8 scale).
size_t KvHeadBytes(KvDType d, int64_t head_dim);
// Bytes one position's K (or V) row takes: n_kv_heads * KvHeadBytes.
size_t KvRowBytes(KvDType d, int64_t n_kv_heads, int64_t head_dim);
// Writes one position's row x[n_kv_heads * head_dim] to `dst` (KvRowBytes bytes) in format `d`
// (half: round to nearest even; q8: as above, round to nearest), head after head.
void StoreKvRow(KvDType d, const float* x, int64_t n_kv_heads, int64_t head_dim, void* dst);

struct AttentionShape {
  int64_t n_heads = 0;     // query heads
  int64_t n_kv_heads = 0;  // key/value heads; query head h uses kv head h / (n_heads / n_kv_heads)
  int64_t head_dim = 0;
  float scale = 1.0f;      // multiplies q·k
};

// Cached keys and values: head g's part of position t starts at byte t * pos_stride + g *
// head_stride of k / v (KvHeadBytes of it). The defaults (0) are rows of whole positions as
// StoreKvRow writes them: pos_stride KvRowBytes, head_stride KvHeadBytes. A head-major cache
// (each head's positions contiguous: pos_stride KvHeadBytes, head_stride capacity * KvHeadBytes)
// lets decode stream each head's rows instead of reading a head's part of every 2 KB row.
struct KvView {
  const void* k = nullptr;
  const void* v = nullptr;
  KvDType dtype = KvDType::kF32;
  int64_t pos_stride = 0;
  int64_t head_stride = 0;
};

// q: [S, n_heads, head_dim] for query positions past..past+S-1.
// kv: cache rows for positions 0..past+S-1.
// out: [S, n_heads, head_dim]. Query s attends to positions 0..past+s.
void CausalAttention(const float* q, const KvView& kv, int64_t past, int64_t S, const AttentionShape& shape,
                     float* out, ThreadPool* pool);
// Several sequences at once (a batched decoder step): job i is the call above with its own
// queries, cache, past, S and output. The decode-sized ones share one dispatch over the pool;
// each job's result is the same as from its own call.
struct AttentionJob {
  const float* q = nullptr;
  KvView kv;
  int64_t past = 0, S = 0;
  float* out = nullptr;
};
void CausalAttention(std::span<const AttentionJob> jobs, const AttentionShape& shape, ThreadPool* pool);
// The float32 cache form of the first.
void CausalAttention(const float* q, const float* k, const float* v, int64_t past, int64_t S,
                     const AttentionShape& shape, float* out, ThreadPool* pool);

// out[i] = x[i] rounded to IEEE half (round to nearest even), i < n.
void F32ToF16Row(const float* x, int64_t n, uint16_t* out);

namespace attention_internal {

// Kernels behind CausalAttention, one table per instruction set. Cached rows are `stride`
// elements apart (for q8, bytes; its row scales are read from `sc` + t * stride, `sc` being the
// first row's values + head_dim).
struct RowKernels {
  // Decode, for G query heads of one group (q: G rows of hd floats) and `len` cached rows:
  //   scores: s[g * len + t] = scale * dot(q_g, k_t)
  //   accum:  out[g * hd + d] += sum_t p[g * ldp + t] * v_t[d]
  void (*scores_f32)(const float* q, int G, const float* k, int64_t stride, int64_t len, int64_t hd, float scale,
                     float* s);
  void (*scores_f16)(const float* q, int G, const uint16_t* k, int64_t stride, int64_t len, int64_t hd,
                     float scale, float* s);
  void (*scores_q8)(const float* q, int G, const int8_t* k, const uint8_t* sc, int64_t stride, int64_t len,
                    int64_t hd, float scale, float* s);
  void (*accum_f32)(const float* p, int64_t ldp, int G, const float* v, int64_t stride, int64_t len, int64_t hd,
                    float* out);
  void (*accum_f16)(const float* p, int64_t ldp, int G, const uint16_t* v, int64_t stride, int64_t len,
                    int64_t hd, float* out);
  void (*accum_q8)(const float* p, int64_t ldp, int G, const int8_t* v, const uint8_t* sc, int64_t stride,
                   int64_t len, int64_t hd, float* out);
  void (*to_f16)(const float* x, int64_t n, uint16_t* out);
  // Flash tiles. widen: dst[t * hdp + d] = row t's value d as float (0 for hd <= d < hdp).
  void (*widen_f32)(const float* k, int64_t stride, int64_t n, int64_t hd, int64_t hdp, float* dst);
  void (*widen_f16)(const uint16_t* k, int64_t stride, int64_t n, int64_t hd, int64_t hdp, float* dst);
  void (*widen_q8)(const int8_t* k, const uint8_t* sc, int64_t stride, int64_t n, int64_t hd, int64_t hdp,
                   float* dst);
  // s[r * lds + t] = dot(q_r, k_t) over hdp (a multiple of 8), r < rows (a multiple of 4), t < n.
  void (*tile_qk)(const float* q, int64_t rows, const float* k, int64_t n, int64_t hdp, float* s, int64_t lds);
  // Online softmax over s[r][0..n) for r < rows: new max m[r], p = exp(s - m) in place, l[r] = l[r] *
  // alpha + sum p, o[r][0..hdp) *= alpha with alpha = exp(old m - new m). -inf scores give p = 0.
  // Also the decode rows' softmax (any rows, hdp 0: nothing to rescale).
  void (*tile_softmax)(float* s, int64_t lds, int64_t rows, int64_t n, float* m, float* l, float* o, int64_t hdp);
  // o[r * hdp + d] += sum_{t < n} p[r * ldp + t] * v[t * hdp + d], r < rows (a multiple of 4).
  void (*tile_pv)(const float* p, int64_t ldp, int64_t rows, const float* v, int64_t n, int64_t hdp, float* o);
  // tile_qk and tile_pv reading the cached rows where they are (`stride` apart; head_dim == hdp),
  // each value converted as widen converts it: the same sums, bit for bit, without the widened
  // copy (decode, where a tile meets only a group's few query rows).
  void (*tile_qk_f32)(const float* q, int64_t rows, const float* k, int64_t stride, int64_t n, int64_t hdp, float* s,
                      int64_t lds);
  void (*tile_qk_f16)(const float* q, int64_t rows, const uint16_t* k, int64_t stride, int64_t n, int64_t hdp,
                      float* s, int64_t lds);
  void (*tile_qk_q8)(const float* q, int64_t rows, const int8_t* k, const uint8_t* sc, int64_t stride, int64_t n,
                     int64_t hdp, float* s, int64_t lds);
  void (*tile_pv_f32)(const float* p, int64_t ldp, int64_t rows, const float* v, int64_t stride, int64_t n,
                      int64_t hdp, float* o);
  void (*tile_pv_f16)(const float* p, int64_t ldp, int64_t rows, const uint16_t* v, int64_t stride, int64_t n,
                      int64_t hdp, float* o);
  void (*tile_pv_q8)(const float* p, int64_t ldp, int64_t rows, const int8_t* v, const uint8_t* sc, int64_t stride,
                     int64_t n, int64_t hdp, float* o);
};

const RowKernels& ScalarRowKernels();
// The Highway source attention_hwy-inl.h compiled for AVX2 in attention_avx2.cc (x86-64 builds)
// and for NEON in attention_neon.cc (aarch64 builds); reached through RowKernelsFor.
const RowKernels& Avx2RowKernels();
const RowKernels& NeonRowKernels();
// The table of `isa` (an ISA in AvailableIsas()): that of FloatKernelIsa(isa), so avxvnni and
// avx512 use the AVX2 rows, both NEON ISAs the NEON rows.
const RowKernels& RowKernelsFor(Isa isa);
// RowKernelsFor(ActiveIsa()).
const RowKernels& ActiveRowKernels();

enum class Path { kAuto, kRows, kFlash };
// CausalAttention with a given table and path (tests compare them).
void CausalAttentionWith(const RowKernels& rk, Path path, const float* q, const KvView& kv, int64_t past, int64_t S,
                         const AttentionShape& shape, float* out, ThreadPool* pool);
void CausalAttentionWith(const RowKernels& rk, Path path, std::span<const AttentionJob> jobs, const AttentionShape& shape,
                         ThreadPool* pool);

}  // namespace attention_internal

}  // namespace phi4mm
