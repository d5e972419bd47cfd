// NEON kernels for CausalAttention on aarch64 (compiled with -march=armv8-a, the baseline; reached
// through RowKernelsFor for the neon and neondot ISAs). The table starts from the scalar one and
// replaces the dot products and weighted sums, which dominate decode and prefill: decode scores
// (f32 and f16 rows, half rows widened with fcvtl as they are loaded: four cached rows against up
// to three query heads per tile) and the weighted sum over cached rows (32 output columns of up to
// three heads in registers); the flash tiles' Q·Kᵀ (4 query rows against one key, 8 accumulators)
// and P·V (on the weighted-sum kernel), and the f16 tile widening. The q8 rows, the conversion to
// half and the online softmax (std::exp) stay scalar. These mirror the AVX2 row kernels'
// structure (attention_avx2.cc); they are checked against scalar under QEMU and not timed on ARM.
#include <arm_neon.h>

#include "phi4mm/base/half.h"
#include "phi4mm/kernels/attention.h"

namespace phi4mm::attention_internal {

namespace {

inline float32x4_t Load4(const float* p) { return vld1q_f32(p); }
inline float32x4_t Load4(const uint16_t* p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }
inline float Load1(const float* p) { return *p; }
inline float Load1(const uint16_t* p) {
  return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(*p))), 0);
}

// Asks for the cache lines of one head's part of a cached row; the scores ask for row t +
// kPrefetchRows (when there is one) while row t is computed. A head's rows lie `stride` apart, and a
// batch of sequences keeps the KV cache out of the caches.
constexpr int64_t kPrefetchRows = 8;
template <typename E>
inline void PrefetchRow(const E* row, int64_t hd) {
  const char* p = reinterpret_cast<const char*>(row);
  for (int64_t off = 0; off < hd * static_cast<int64_t>(sizeof(E)); off += 64) __builtin_prefetch(p + off);
}

template <typename E>
inline void PrefetchAhead(const E* rows, int64_t stride, int64_t t, int64_t len, int64_t hd) {
  if (t + kPrefetchRows < len) PrefetchRow(rows + (t + kPrefetchRows) * stride, hd);
}

// Scores of G query heads (G <= 3) against cached rows t..t+3: 4·G independent 4-wide FMA
// chains (12 for a group of three heads, which covers the fmla latency at two or four per cycle),
// each cached row widened once for all G heads, and one pairwise-add tree per head that leaves the
// four rows' sums in one vector. The one-row loop it replaces ran two chains per head.
template <int G, typename E>
__attribute__((always_inline)) inline void ScoresTile4(const float* q, const E* k, int64_t stride, int64_t hd,
                                                       float scale, float* s, int64_t len, int64_t t) {
  float32x4_t acc[4][G];
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r)
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) acc[r][g] = vdupq_n_f32(0.0f);
  int64_t d = 0;
  for (; d + 4 <= hd; d += 4) {
    float32x4_t qv[G];
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) qv[g] = vld1q_f32(q + g * hd + d);
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
      const float32x4_t kv = Load4(k + (t + r) * stride + d);
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) acc[r][g] = vfmaq_f32(acc[r][g], qv[g], kv);
    }
  }
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g) {
    float32x4_t x = vpaddq_f32(vpaddq_f32(acc[0][g], acc[1][g]), vpaddq_f32(acc[2][g], acc[3][g]));  // rows t..t+3
    if (d < hd) {
      float tail[4] = {0, 0, 0, 0};
      for (int r = 0; r < 4; ++r)
        for (int64_t e = d; e < hd; ++e) tail[r] += q[g * hd + e] * Load1(k + (t + r) * stride + e);
      x = vaddq_f32(x, vld1q_f32(tail));
    }
    vst1q_f32(s + g * len + t, vmulq_n_f32(x, scale));
  }
}

// G query heads against one row t (the last len % 4 rows).
template <int G, typename E>
inline void ScoresRow(const float* q, const E* k, int64_t stride, int64_t hd, float scale, float* s, int64_t len,
                      int64_t t) {
  for (int g = 0; g < G; ++g) {
    float32x4_t acc = vdupq_n_f32(0.0f);
    int64_t d = 0;
    for (; d + 4 <= hd; d += 4) acc = vfmaq_f32(acc, vld1q_f32(q + g * hd + d), Load4(k + t * stride + d));
    float sum = vaddvq_f32(acc);
    for (; d < hd; ++d) sum += q[g * hd + d] * Load1(k + t * stride + d);
    s[g * len + t] = sum * scale;
  }
}

template <int G, typename E>
void ScoresG(const float* q, const E* k, int64_t stride, int64_t len, int64_t hd, float scale, float* s) {
  int64_t t = 0;
  for (; t + 4 <= len; t += 4) {
    for (int64_t a = t; a < t + 4; ++a) PrefetchAhead(k, stride, a, len, hd);
    ScoresTile4<G>(q, k, stride, hd, scale, s, len, t);
  }
  for (; t < len; ++t) ScoresRow<G>(q, k, stride, hd, scale, s, len, t);
}

template <typename E>
void Scores(const float* q, int G, const E* k, int64_t stride, int64_t len, int64_t hd, float scale, float* s) {
  for (int g0 = 0; g0 < G; g0 += 3) {
    const float* qg = q + g0 * hd;
    float* sg = s + g0 * len;
    switch (G - g0 < 3 ? G - g0 : 3) {
      case 1: ScoresG<1>(qg, k, stride, len, hd, scale, sg); break;
      case 2: ScoresG<2>(qg, k, stride, len, hd, scale, sg); break;
      default: ScoresG<3>(qg, k, stride, len, hd, scale, sg); break;
    }
  }
}

// out[g][d0..d0+4C) += sum_t p[g][t] * v_t[d0..d0+4C) for t in [t0, t1), g < G (query heads, or
// the flash tile's query rows in TilePv): the output columns stay in G·C registers over the rows
// (C = 8, 32 columns, with three heads: 24 accumulators of the 32 registers), each cached slice is
// widened once for all G heads. The loop it replaces loaded and stored every output column once
// per cached row and head.
template <int G, int C, typename E>
__attribute__((always_inline)) inline void AccumCols(const float* p, int64_t ldp, const E* v, int64_t stride,
                                                     int64_t t0, int64_t t1, int64_t hd, int64_t d0, float* out) {
  float32x4_t acc[G][C];
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[g][c] = vld1q_f32(out + g * hd + d0 + 4 * c);
  for (int64_t t = t0; t < t1; ++t) {
    float w[G];
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) w[g] = p[g * ldp + t];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const float32x4_t vv = Load4(v + t * stride + d0 + 4 * c);
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) acc[g][c] = vfmaq_n_f32(acc[g][c], vv, w[g]);
    }
  }
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) vst1q_f32(out + g * hd + d0 + 4 * c, acc[g][c]);
}

template <int G, typename E>
void AccumG(const float* p, int64_t ldp, const E* v, int64_t stride, int64_t len, int64_t hd, float* out) {
  constexpr int64_t kBlock = 64;  // cached rows per pass over the output columns (in L1 for the next)
  constexpr int kC = 8;
  for (int64_t t0 = 0; t0 < len; t0 += kBlock) {
    const int64_t t1 = t0 + kBlock < len ? t0 + kBlock : len;
    // The first block's rows, then each next block's while this one is summed.
    if (t0 == 0)
      for (int64_t a = t0; a < t1; ++a) PrefetchRow(v + a * stride, hd);
    for (int64_t a = t1; a < (t1 + kBlock < len ? t1 + kBlock : len); ++a) PrefetchRow(v + a * stride, hd);
    int64_t d = 0;
    for (; d + 4 * kC <= hd; d += 4 * kC) AccumCols<G, kC>(p, ldp, v, stride, t0, t1, hd, d, out);
    for (; d + 4 <= hd; d += 4) AccumCols<G, 1>(p, ldp, v, stride, t0, t1, hd, d, out);
    for (; d < hd; ++d)
      for (int64_t t = t0; t < t1; ++t) {
        const float x = Load1(v + t * stride + d);
        for (int g = 0; g < G; ++g) out[g * hd + d] += p[g * ldp + t] * x;
      }
  }
}

template <typename E>
void Accum(const float* p, int64_t ldp, int G, const E* v, int64_t stride, int64_t len, int64_t hd, float* out) {
  for (int g0 = 0; g0 < G; g0 += 3) {
    const float* pg = p + g0 * ldp;
    float* og = out + g0 * hd;
    switch (G - g0 < 3 ? G - g0 : 3) {
      case 1: AccumG<1>(pg, ldp, v, stride, len, hd, og); break;
      case 2: AccumG<2>(pg, ldp, v, stride, len, hd, og); break;
      default: AccumG<3>(pg, ldp, v, stride, len, hd, og); break;
    }
  }
}

void ScoresF32(const float* q, int G, const float* k, int64_t stride, int64_t len, int64_t hd, float scale, float* s) {
  Scores(q, G, k, stride, len, hd, scale, s);
}
void ScoresF16(const float* q, int G, const uint16_t* k, int64_t stride, int64_t len, int64_t hd, float scale,
               float* s) {
  Scores(q, G, k, stride, len, hd, scale, s);
}
void AccumF32(const float* p, int64_t ldp, int G, const float* v, int64_t stride, int64_t len, int64_t hd, float* out) {
  Accum(p, ldp, G, v, stride, len, hd, out);
}
void AccumF16(const float* p, int64_t ldp, int G, const uint16_t* v, int64_t stride, int64_t len, int64_t hd,
              float* out) {
  Accum(p, ldp, G, v, stride, len, hd, out);
}

void WidenF16(const uint16_t* k, int64_t stride, int64_t n, int64_t hd, int64_t hdp, float* dst) {
  const int64_t hd4 = hd & ~int64_t{3};
  for (int64_t t = 0; t < n; ++t) {
    const uint16_t* kr = k + t * stride;
    float* d0 = dst + t * hdp;
    for (int64_t d = 0; d < hd4; d += 4) vst1q_f32(d0 + d, Load4(kr + d));
    for (int64_t d = hd4; d < hd; ++d) d0[d] = Load1(kr + d);
    for (int64_t d = hd; d < hdp; ++d) d0[d] = 0.0f;
  }
}

// rows is a multiple of 4 and hdp of 8 (attention.h).
void TileQk(const float* q, int64_t rows, const float* k, int64_t n, int64_t hdp, float* s, int64_t lds) {
  for (int64_t r = 0; r < rows; r += 4) {
    const float* q0 = q + r * hdp;
    for (int64_t t = 0; t < n; ++t) {
      const float* kt = k + t * hdp;
      float32x4_t a[4][2];
      for (auto& ar : a) ar[0] = ar[1] = vdupq_n_f32(0.0f);
      for (int64_t d = 0; d < hdp; d += 8) {
        const float32x4_t k0 = vld1q_f32(kt + d), k1 = vld1q_f32(kt + d + 4);
        for (int j = 0; j < 4; ++j) {
          a[j][0] = vfmaq_f32(a[j][0], vld1q_f32(q0 + j * hdp + d), k0);
          a[j][1] = vfmaq_f32(a[j][1], vld1q_f32(q0 + j * hdp + d + 4), k1);
        }
      }
      for (int j = 0; j < 4; ++j) s[(r + j) * lds + t] = vaddvq_f32(vaddq_f32(a[j][0], a[j][1]));
    }
  }
}

// The flash tile's P·V on AccumCols: four query rows at a time (rows is a multiple of 4), 16
// accumulators for 16 columns.
void TilePv(const float* p, int64_t ldp, int64_t rows, const float* v, int64_t n, int64_t hdp, float* o) {
  for (int64_t r = 0; r < rows; r += 4) {
    int64_t d = 0;
    for (; d + 16 <= hdp; d += 16) AccumCols<4, 4>(p + r * ldp, ldp, v, hdp, 0, n, hdp, d, o + r * hdp);
    for (; d < hdp; d += 4) AccumCols<4, 1>(p + r * ldp, ldp, v, hdp, 0, n, hdp, d, o + r * hdp);
  }
}

RowKernels MakeNeon() {
  RowKernels k = ScalarRowKernels();
  k.scores_f32 = ScoresF32;
  k.scores_f16 = ScoresF16;
  k.accum_f32 = AccumF32;
  k.accum_f16 = AccumF16;
  k.widen_f16 = WidenF16;
  k.tile_qk = TileQk;
  k.tile_pv = TilePv;
  return k;
}

}  // namespace

const RowKernels& NeonRowKernels() {
  static const RowKernels k = MakeNeon();
  return k;
}

}  // namespace phi4mm::attention_internal
