// AVX2 + FMA + F16C kernels for CausalAttention (compiled with -mavx2 -mfma -mf16c; reached only
// through RowKernelsFor when the process runs the AVX2, AVX-VNNI or AVX-512 ISA). Decode: scores
// take four cached rows at a time against up to three query heads (twelve independent
// accumulators); the weighted sum walks the cached rows in blocks that stay in L1 and keeps 32
// output columns of up to three heads in registers; half rows are widened with vcvtph2ps and int8
// rows with vpmovsxbd + vcvtdq2ps as they are loaded, the q8 row scale folded into the score or
// the weight. Flash tiles: the key/value tile is widened to float32 once; Q·Kᵀ runs 4 query rows
// x 3 keys (12 accumulators, reduced with horizontal adds), the softmax uses a vectorised exp
// (Cody-Waite range reduction and a degree-5 polynomial, ~1 ulp), and P·V keeps 4 rows x 16
// output columns in registers over the tile (4 x 24 and 2 x 48 measured slower).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "phi4mm/kernels/avx2_reduce.h"
#include "phi4mm/base/half.h"
#include "phi4mm/kernels/attention.h"

namespace phi4mm::attention_internal {

namespace {

using avx2::HSum;

inline __m256 Load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 Load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline __m256 Load8(const int8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline float Load1(const float* p) { return *p; }
inline float Load1(const uint16_t* p) { return _cvtsh_ss(*p); }
inline float Load1(const int8_t* p) { return static_cast<float>(*p); }

// Row t's factor: 1 for float rows, its stored scale for q8 (scales are `stride` bytes apart).
template <typename E>
inline float Factor(const uint8_t* sc, int64_t t, int64_t stride) {
  if constexpr (std::is_same_v<E, int8_t>) {
    float s;
    std::memcpy(&s, sc + t * stride, sizeof(float));
    return s;
  } else {
    return 1.0f;
  }
}

// Asks for the cache lines of one head's part of a cached row (hd elements). The decode path
// reads a head's rows `stride` apart, and a batch of sequences keeps the whole KV cache out of the
// last-level cache, so the rows a few steps ahead are requested while the current ones are used.
template <typename E>
inline void PrefetchRow(const E* row, int64_t hd) {
  const char* p = reinterpret_cast<const char*>(row);
  for (int64_t off = 0; off < hd * static_cast<int64_t>(sizeof(E)); off += 64) _mm_prefetch(p + off, _MM_HINT_T0);
}
constexpr int64_t kPrefetchRows = 8;  // how far ahead ScoresG asks for rows

// Row t's factor times the score scale, for rows t..t+3 as the lanes of one vector.
template <typename E>
inline __m128 Factors4(const uint8_t* sc, int64_t t, int64_t stride, float scale) {
  if constexpr (std::is_same_v<E, int8_t>)
    return _mm_mul_ps(_mm_setr_ps(Factor<E>(sc, t, stride), Factor<E>(sc, t + 1, stride), Factor<E>(sc, t + 2, stride),
                                  Factor<E>(sc, t + 3, stride)),
                      _mm_set1_ps(scale));
  else
    return _mm_set1_ps(scale);
}

// G query heads (G <= 3) against rows t..t+3: 4·G independent FMA chains (12 for a group of 3
// heads, all 16 ymm registers with the heads' query slices), so the FMA latency is covered, and
// per head one horizontal-add tree turns the four rows' accumulators into four scores. The loops
// over rows and heads are unrolled by pragma: otherwise GCC keeps the accumulators on the stack.
// Two rows at a time with a horizontal sum per (row, head) was half as fast in L2 (13.7 against
// 26.4 GB/s of half K rows, one thread, 4096 rows of a group of 3).
template <int G, typename E>
__attribute__((always_inline)) inline void ScoresTile4(const float* q, const E* k, const uint8_t* sc, int64_t stride,
                                                       int64_t hd, float scale, float* s, int64_t len, int64_t t) {
  __m256 acc[4][G];
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r)
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) acc[r][g] = _mm256_setzero_ps();
  int64_t d = 0;
  for (; d + 8 <= hd; d += 8) {
    __m256 qv[G];
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) qv[g] = _mm256_loadu_ps(q + g * hd + d);
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
      const __m256 kv = Load8(k + (t + r) * stride + d);
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) acc[r][g] = _mm256_fmadd_ps(qv[g], kv, acc[r][g]);
    }
  }
  const __m128 f = Factors4<E>(sc, t, stride, scale);
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g) {
    const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(acc[0][g], acc[1][g]), _mm256_hadd_ps(acc[2][g], acc[3][g]));
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));  // rows t..t+3
    if (d < hd) {
      alignas(16) float tail[4] = {0, 0, 0, 0};
      for (int r = 0; r < 4; ++r)
        for (int64_t e = d; e < hd; ++e) tail[r] += q[g * hd + e] * Load1(k + (t + r) * stride + e);
      x = _mm_add_ps(x, _mm_load_ps(tail));
    }
    _mm_storeu_ps(s + g * len + t, _mm_mul_ps(x, f));
  }
}

// G query heads against one row t (the last len % 4 rows).
template <int G, typename E>
inline void ScoresRow(const float* q, const E* k, const uint8_t* sc, int64_t stride, int64_t hd, float scale, float* s,
                      int64_t len, int64_t t) {
  const float f = scale * Factor<E>(sc, t, stride);
  for (int g = 0; g < G; ++g) {
    __m256 acc = _mm256_setzero_ps();
    int64_t d = 0;
    for (; d + 8 <= hd; d += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + g * hd + d), Load8(k + t * stride + d), acc);
    float sum = HSum(acc);
    for (; d < hd; ++d) sum += q[g * hd + d] * Load1(k + t * stride + d);
    s[g * len + t] = sum * f;
  }
}

template <int G, typename E>
void ScoresG(const float* q, const E* k, const uint8_t* sc, int64_t stride, int64_t len, int64_t hd, float scale,
             float* s) {
  int64_t t = 0;
  for (; t + 4 <= len; t += 4) {
    for (int64_t a = t + kPrefetchRows; a < std::min(len, t + kPrefetchRows + 4); ++a) PrefetchRow(k + a * stride, hd);
    ScoresTile4<G>(q, k, sc, stride, hd, scale, s, len, t);
  }
  for (; t < len; ++t) ScoresRow<G>(q, k, sc, stride, hd, scale, s, len, t);
}

template <typename E>
void Scores(const float* q, int G, const E* k, const uint8_t* sc, int64_t stride, int64_t len, int64_t hd,
            float scale, float* s) {
  for (int g0 = 0; g0 < G; g0 += 3) {
    const float* qg = q + g0 * hd;
    float* sg = s + g0 * len;
    switch (std::min(3, G - g0)) {
      case 1: ScoresG<1>(qg, k, sc, stride, len, hd, scale, sg); break;
      case 2: ScoresG<2>(qg, k, sc, stride, len, hd, scale, sg); break;
      default: ScoresG<3>(qg, k, sc, stride, len, hd, scale, sg); break;
    }
  }
}

// out[g][d0..d0+8C) += sum_t p[g][t] * f_t * v_t[d0..d0+8C) for t in [t0, t1), g < G (query
// heads here; the flash tile's query rows in TilePv, f_t = 1 for float rows): G·C independent
// FMA chains. C = 4 with a group of three heads (12 accumulators, the three weights and one
// widened slice: all 16 ymm registers) covers the FMA latency, which C = 2 (six chains) did not:
// per cached row 32 FMAs at 4 cycles' latency each in 6 chains. Loops unrolled by pragma so the
// accumulators stay in registers.
template <int G, int C, typename E>
__attribute__((always_inline)) inline void AccumCols(const float* p, int64_t ldp, const E* v, const uint8_t* sc,
                                                     int64_t stride, int64_t t0, int64_t t1, int64_t hd, int64_t d0,
                                                     float* out) {
  __m256 acc[G][C];
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g)
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) acc[g][c] = _mm256_loadu_ps(out + g * hd + d0 + 8 * c);
  for (int64_t t = t0; t < t1; ++t) {
    const float f = Factor<E>(sc, t, stride);
    __m256 w[G];
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) w[g] = _mm256_set1_ps(p[g * ldp + t] * f);
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      const __m256 vv = Load8(v + t * stride + d0 + 8 * c);
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) acc[g][c] = _mm256_fmadd_ps(w[g], vv, acc[g][c]);
    }
  }
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g)
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) _mm256_storeu_ps(out + g * hd + d0 + 8 * c, acc[g][c]);
}

template <int G, typename E>
void AccumG(const float* p, int64_t ldp, const E* v, const uint8_t* sc, int64_t stride, int64_t len, int64_t hd,
            float* out) {
  constexpr int64_t kBlock = 64;  // cached rows per pass over the output columns
  constexpr int kC = 4;  // ymm vectors of output columns per pass (G <= 3)
  for (int64_t t0 = 0; t0 < len; t0 += kBlock) {
    const int64_t t1 = std::min(len, t0 + kBlock);
    // The first block's rows, then each next block's while this one is summed.
    if (t0 == 0)
      for (int64_t a = t0; a < t1; ++a) PrefetchRow(v + a * stride, hd);
    for (int64_t a = t1; a < std::min(len, t1 + kBlock); ++a) PrefetchRow(v + a * stride, hd);
    int64_t d = 0;
    for (; d + 8 * kC <= hd; d += 8 * kC) AccumCols<G, kC>(p, ldp, v, sc, stride, t0, t1, hd, d, out);
    for (; d + 8 <= hd; d += 8) AccumCols<G, 1>(p, ldp, v, sc, stride, t0, t1, hd, d, out);
    for (; d < hd; ++d)
      for (int64_t t = t0; t < t1; ++t) {
        const float x = Load1(v + t * stride + d) * Factor<E>(sc, t, stride);
        for (int g = 0; g < G; ++g) out[g * hd + d] += p[g * ldp + t] * x;
      }
  }
}

template <typename E>
void Accum(const float* p, int64_t ldp, int G, const E* v, const uint8_t* sc, int64_t stride, int64_t len,
           int64_t hd, float* out) {
  for (int g0 = 0; g0 < G; g0 += 3) {
    const float* pg = p + g0 * ldp;
    float* og = out + g0 * hd;
    switch (std::min(3, G - g0)) {
      case 1: AccumG<1>(pg, ldp, v, sc, stride, len, hd, og); break;
      case 2: AccumG<2>(pg, ldp, v, sc, stride, len, hd, og); break;
      default: AccumG<3>(pg, ldp, v, sc, stride, len, hd, og); break;
    }
  }
}

void ScoresF32(const float* q, int G, const float* k, int64_t stride, int64_t len, int64_t hd, float scale, float* s) {
  Scores(q, G, k, nullptr, stride, len, hd, scale, s);
}
void ScoresF16(const float* q, int G, const uint16_t* k, int64_t stride, int64_t len, int64_t hd, float scale,
               float* s) {
  Scores(q, G, k, nullptr, stride, len, hd, scale, s);
}
void AccumF32(const float* p, int64_t ldp, int G, const float* v, int64_t stride, int64_t len, int64_t hd, float* out) {
  Accum(p, ldp, G, v, nullptr, stride, len, hd, out);
}
void AccumF16(const float* p, int64_t ldp, int G, const uint16_t* v, int64_t stride, int64_t len, int64_t hd,
              float* out) {
  Accum(p, ldp, G, v, nullptr, stride, len, hd, out);
}

void ToF16(const float* x, int64_t n, uint16_t* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; ++i) out[i] = F32ToF16(x[i]);
}

template <typename E>
void Widen(const E* k, const uint8_t* sc, int64_t stride, int64_t n, int64_t hd, int64_t hdp, float* dst) {
  for (int64_t t = 0; t < n; ++t) {
    const E* src = k + t * stride;
    float* o = dst + t * hdp;
    const float f = Factor<E>(sc, t, stride);
    const __m256 fv = _mm256_set1_ps(f);
    int64_t d = 0;
    for (; d + 8 <= hd; d += 8) {
      if constexpr (std::is_same_v<E, int8_t>) _mm256_storeu_ps(o + d, _mm256_mul_ps(Load8(src + d), fv));
      else _mm256_storeu_ps(o + d, Load8(src + d));
    }
    for (; d < hd; ++d) o[d] = Load1(src + d) * f;
    for (; d < hdp; ++d) o[d] = 0.0f;
  }
}
void WidenF32(const float* k, int64_t stride, int64_t n, int64_t hd, int64_t hdp, float* dst) {
  Widen(k, nullptr, stride, n, hd, hdp, dst);
}
void WidenF16(const uint16_t* k, int64_t stride, int64_t n, int64_t hd, int64_t hdp, float* dst) {
  Widen(k, nullptr, stride, n, hd, hdp, dst);
}

// The four sums of a0..a3 (lane i = sum of ai's eight lanes).
inline __m128 HSum4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  const __m256 x = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  return _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
}

// Rows r0..r0+4 against keys t..t+K (K = 1..3).
template <int K>
void QkMicro(const float* q, const float* k, int64_t hdp, float* s, int64_t lds, int64_t t) {
  __m256 acc[4][K];
  for (int r = 0; r < 4; ++r)
    for (int j = 0; j < K; ++j) acc[r][j] = _mm256_setzero_ps();
  for (int64_t d = 0; d < hdp; d += 8) {
    __m256 kv[K];
    for (int j = 0; j < K; ++j) kv[j] = _mm256_loadu_ps(k + (t + j) * hdp + d);
    for (int r = 0; r < 4; ++r) {
      const __m256 qv = _mm256_loadu_ps(q + r * hdp + d);
      for (int j = 0; j < K; ++j) acc[r][j] = _mm256_fmadd_ps(qv, kv[j], acc[r][j]);
    }
  }
  for (int j = 0; j < K; ++j) {
    alignas(16) float sums[4];
    _mm_store_ps(sums, HSum4(acc[0][j], acc[1][j], acc[2][j], acc[3][j]));
    for (int r = 0; r < 4; ++r) s[r * lds + t + j] = sums[r];
  }
}

void TileQk(const float* q, int64_t rows, const float* k, int64_t n, int64_t hdp, float* s, int64_t lds) {
  for (int64_t r = 0; r < rows; r += 4) {
    const float* qr = q + r * hdp;
    float* sr = s + r * lds;
    int64_t t = 0;
    for (; t + 3 <= n; t += 3) QkMicro<3>(qr, k, hdp, sr, lds, t);
    if (n - t == 2) QkMicro<2>(qr, k, hdp, sr, lds, t);
    else if (n - t == 1) QkMicro<1>(qr, k, hdp, sr, lds, t);
  }
}

// exp(x) for x <= 0 (the softmax's arguments); below -87 (including -inf) it returns 0.
inline __m256 ExpNonPositive(__m256 x) {
  const __m256 zero_mask = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_GE_OQ);
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
  const __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
  return _mm256_and_ps(_mm256_mul_ps(y, _mm256_castsi256_ps(e)), zero_mask);
}

void TileSoftmax(float* s, int64_t lds, int64_t rows, int64_t n, float* m, float* l, float* o, int64_t hdp) {
  for (int64_t r = 0; r < rows; ++r) {
    float* sr = s + r * lds;
    __m256 mv = _mm256_set1_ps(m[r]);
    int64_t t = 0;
    for (; t + 8 <= n; t += 8) mv = _mm256_max_ps(mv, _mm256_loadu_ps(sr + t));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mv), _mm256_extractf128_ps(mv, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    float mx = std::max(_mm_cvtss_f32(m4), _mm_cvtss_f32(_mm_movehdup_ps(m4)));
    for (; t < n; ++t) mx = std::max(mx, sr[t]);
    if (mx == -INFINITY) {
      std::fill(sr, sr + n, 0.0f);
      continue;
    }
    const __m256 mxv = _mm256_set1_ps(mx);
    __m256 sum = _mm256_setzero_ps();
    t = 0;
    for (; t + 8 <= n; t += 8) {
      const __m256 p = ExpNonPositive(_mm256_sub_ps(_mm256_loadu_ps(sr + t), mxv));
      _mm256_storeu_ps(sr + t, p);
      sum = _mm256_add_ps(sum, p);
    }
    float total = HSum(sum);
    for (; t < n; ++t) total += (sr[t] = std::exp(sr[t] - mx));
    const float alpha = std::exp(m[r] - mx);
    m[r] = mx;
    l[r] = l[r] * alpha + total;
    if (alpha != 1.0f) {
      const __m256 av = _mm256_set1_ps(alpha);
      for (int64_t d = 0; d < hdp; d += 8) _mm256_storeu_ps(o + r * hdp + d, _mm256_mul_ps(av, _mm256_loadu_ps(o + r * hdp + d)));
    }
  }
}

// o[r0..r0+4][d0..d0+8C) += P · V over the tile's n keys: AccumCols on the widened tile (float
// rows hdp apart, no row factor), 4 query rows x 2 vectors = 8 accumulators. With the accumulators
// left as a stack array this loop was store-bound (1.4x slower on the Zen 1 EPYC); a 2 x 6 tile
// measured slower again than 4 x 2.
void TilePv(const float* p, int64_t ldp, int64_t rows, const float* v, int64_t n, int64_t hdp, float* o) {
  for (int64_t r = 0; r < rows; r += 4) {
    int64_t d = 0;
    for (; d + 16 <= hdp; d += 16) AccumCols<4, 2>(p + r * ldp, ldp, v, nullptr, hdp, 0, n, hdp, d, o + r * hdp);
    if (d < hdp) AccumCols<4, 1>(p + r * ldp, ldp, v, nullptr, hdp, 0, n, hdp, d, o + r * hdp);
  }
}

}  // namespace

const RowKernels& Avx2RowKernels() {
  static const RowKernels k{ScoresF32,     ScoresF16, Scores<int8_t>, AccumF32, AccumF16,    Accum<int8_t>, ToF16,
                            WidenF32,      WidenF16,  Widen<int8_t>,  TileQk,   TileSoftmax, TilePv};
  return k;
}

}  // namespace phi4mm::attention_internal
