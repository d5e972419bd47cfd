// AVX2 + FMA + F16C row kernels for CausalAttention (compiled with -mavx2 -mfma -mf16c; reached only
// through ActiveRowKernels when the CPU has them). Scores take two cached rows at a time against up
// to four query heads (eight independent accumulators); the weighted sum walks the cached rows in
// blocks that stay in L1 and keeps 16 output columns of up to four heads in registers. Half rows
// are widened with vcvtph2ps as they are loaded.
#include <immintrin.h>

#include <algorithm>

#include "phi4mm/base/half.h"
#include "phi4mm/kernels/attention.h"

namespace phi4mm::attention_internal {

namespace {

inline float HSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline __m256 Load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 Load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline float Load1(const float* p) { return *p; }
inline float Load1(const uint16_t* p) { return _cvtsh_ss(*p); }

// G query heads (G <= 4) against rows t and t+1 (R = 1 or 2).
template <int G, int R, typename E>
void ScoresTile(const float* q, const E* k, int64_t stride, int64_t hd, float scale, float* s, int64_t len,
                int64_t t) {
  __m256 acc[R][G];
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < G; ++g) acc[r][g] = _mm256_setzero_ps();
  int64_t d = 0;
  for (; d + 8 <= hd; d += 8) {
    __m256 kv[R];
    for (int r = 0; r < R; ++r) kv[r] = Load8(k + (t + r) * stride + d);
    for (int g = 0; g < G; ++g) {
      const __m256 qv = _mm256_loadu_ps(q + g * hd + d);
      for (int r = 0; r < R; ++r) acc[r][g] = _mm256_fmadd_ps(qv, kv[r], acc[r][g]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < G; ++g) {
      float sum = HSum(acc[r][g]);
      for (int64_t e = d; e < hd; ++e) sum += q[g * hd + e] * Load1(k + (t + r) * stride + e);
      s[g * len + t + r] = sum * scale;
    }
}

template <int G, typename E>
void ScoresG(const float* q, const E* k, int64_t stride, int64_t len, int64_t hd, float scale, float* s) {
  int64_t t = 0;
  for (; t + 2 <= len; t += 2) ScoresTile<G, 2>(q, k, stride, hd, scale, s, len, t);
  if (t < len) ScoresTile<G, 1>(q, k, stride, hd, scale, s, len, t);
}

template <typename E>
void Scores(const float* q, int G, const E* k, int64_t stride, int64_t len, int64_t hd, float scale, float* s) {
  for (int g0 = 0; g0 < G; g0 += 4) {
    const float* qg = q + g0 * hd;
    float* sg = s + g0 * len;
    switch (std::min(4, G - g0)) {
      case 1: ScoresG<1>(qg, k, stride, len, hd, scale, sg); break;
      case 2: ScoresG<2>(qg, k, stride, len, hd, scale, sg); break;
      case 3: ScoresG<3>(qg, k, stride, len, hd, scale, sg); break;
      default: ScoresG<4>(qg, k, stride, len, hd, scale, sg); break;
    }
  }
}

// out[g][d0..d0+16) += sum_t p[g][t] * v_t[d0..d0+16) for t in [t0, t1).
template <int G, typename E>
void AccumCols16(const float* p, int64_t ldp, const E* v, int64_t stride, int64_t t0, int64_t t1, int64_t hd,
                 int64_t d0, float* out) {
  __m256 acc[G][2];
  for (int g = 0; g < G; ++g) {
    acc[g][0] = _mm256_loadu_ps(out + g * hd + d0);
    acc[g][1] = _mm256_loadu_ps(out + g * hd + d0 + 8);
  }
  for (int64_t t = t0; t < t1; ++t) {
    const __m256 v0 = Load8(v + t * stride + d0), v1 = Load8(v + t * stride + d0 + 8);
    for (int g = 0; g < G; ++g) {
      const __m256 w = _mm256_broadcast_ss(p + g * ldp + t);
      acc[g][0] = _mm256_fmadd_ps(w, v0, acc[g][0]);
      acc[g][1] = _mm256_fmadd_ps(w, v1, acc[g][1]);
    }
  }
  for (int g = 0; g < G; ++g) {
    _mm256_storeu_ps(out + g * hd + d0, acc[g][0]);
    _mm256_storeu_ps(out + g * hd + d0 + 8, acc[g][1]);
  }
}

template <int G, typename E>
void AccumG(const float* p, int64_t ldp, const E* v, int64_t stride, int64_t len, int64_t hd, float* out) {
  constexpr int64_t kBlock = 64;  // cached rows per pass over the output columns
  for (int64_t t0 = 0; t0 < len; t0 += kBlock) {
    const int64_t t1 = std::min(len, t0 + kBlock);
    int64_t d = 0;
    for (; d + 16 <= hd; d += 16) AccumCols16<G>(p, ldp, v, stride, t0, t1, hd, d, out);
    for (; d < hd; ++d)
      for (int64_t t = t0; t < t1; ++t) {
        const float x = Load1(v + t * stride + d);
        for (int g = 0; g < G; ++g) out[g * hd + d] += p[g * ldp + t] * x;
      }
  }
}

template <typename E>
void Accum(const float* p, int64_t ldp, int G, const E* v, int64_t stride, int64_t len, int64_t hd, float* out) {
  for (int g0 = 0; g0 < G; g0 += 4) {
    const float* pg = p + g0 * ldp;
    float* og = out + g0 * hd;
    switch (std::min(4, G - g0)) {
      case 1: AccumG<1>(pg, ldp, v, stride, len, hd, og); break;
      case 2: AccumG<2>(pg, ldp, v, stride, len, hd, og); break;
      case 3: AccumG<3>(pg, ldp, v, stride, len, hd, og); break;
      default: AccumG<4>(pg, ldp, v, stride, len, hd, og); break;
    }
  }
}

void ToF16(const float* x, int64_t n, uint16_t* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; ++i) out[i] = F32ToF16(x[i]);
}

}  // namespace

const RowKernels& Avx2RowKernels() {
  static const RowKernels k{Scores<float>, Scores<uint16_t>, Accum<float>, Accum<uint16_t>, ToF16};
  return k;
}

}  // namespace phi4mm::attention_internal
