// AVX2 + FMA kernels behind the vision operators of vision_ops.h (compiled with -mavx2 -mfma -mf16c;
// reached only through the dispatch in vision_ops.cc when the CPU has them): the register tiles of
// the flash-style bidirectional attention (flash_attention.h: S = Q K^T by 6x16 tiles, P V by
// 4x24 tiles) and the tanh-GELU. exp2 is avx2_exp.h's.
#include <immintrin.h>

#include <cmath>

#include "phi4mm/kernels/avx2_exp.h"
#include "phi4mm/kernels/avx2_reduce.h"
#include "phi4mm/kernels/flash_attention.h"
#include "phi4mm/kernels/vision_ops.h"

namespace phi4mm::vision_internal {

namespace {

using avx2::Exp2;

inline float HMax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

using avx2::HSum;

// The register tiles and row operations flash::Attention runs on.
struct Avx2Tiles {
  static constexpr int64_t kBk = flash::kBk;
  static void ScoreTile6x16(const float* q, const float* kt, int64_t hdp, float* s) {
    __m256 a[6][2];
    for (int r = 0; r < 6; ++r) a[r][0] = a[r][1] = _mm256_setzero_ps();
    for (int64_t d = 0; d < hdp; ++d) {
      const __m256 k0 = _mm256_loadu_ps(kt + d * kBk), k1 = _mm256_loadu_ps(kt + d * kBk + 8);
      for (int r = 0; r < 6; ++r) {
        const __m256 qb = _mm256_broadcast_ss(q + r * hdp + d);
        a[r][0] = _mm256_fmadd_ps(qb, k0, a[r][0]);
        a[r][1] = _mm256_fmadd_ps(qb, k1, a[r][1]);
      }
    }
    for (int r = 0; r < 6; ++r) {
      _mm256_storeu_ps(s + r * kBk, a[r][0]);
      _mm256_storeu_ps(s + r * kBk + 8, a[r][1]);
    }
  }
  // o[r * hdp + c] += sum_j p[r * kBk + j] * v[j * hdp + c] for 4 rows and the first Cols columns
  // (8, 16 or 24: W = Cols / 8 vectors), j < nk.
  template <int Cols>
  static void Accumulate(const float* p, const float* v, int64_t hdp, int64_t nk, float* o) {
    constexpr int W = Cols / 8;
    __m256 a[4][W];
    for (int r = 0; r < 4; ++r)
      for (int w = 0; w < W; ++w) a[r][w] = _mm256_loadu_ps(o + r * hdp + w * 8);
    for (int64_t j = 0; j < nk; ++j) {
      __m256 vv[W];
      for (int w = 0; w < W; ++w) vv[w] = _mm256_loadu_ps(v + j * hdp + w * 8);
      for (int r = 0; r < 4; ++r) {
        const __m256 pb = _mm256_broadcast_ss(p + r * kBk + j);
        for (int w = 0; w < W; ++w) a[r][w] = _mm256_fmadd_ps(pb, vv[w], a[r][w]);
      }
    }
    for (int r = 0; r < 4; ++r)
      for (int w = 0; w < W; ++w) _mm256_storeu_ps(o + r * hdp + w * 8, a[r][w]);
  }
  static float RowMax(const float* s) {
    __m256 mx = _mm256_set1_ps(-INFINITY);
    for (int64_t c = 0; c < kBk; c += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(s + c));
    return HMax(mx);
  }
  static void Exp2Row(float* s, float m) {
    const __m256 mv = _mm256_set1_ps(m);
    for (int64_t c = 0; c < kBk; c += 8) _mm256_storeu_ps(s + c, Exp2(_mm256_sub_ps(_mm256_loadu_ps(s + c), mv)));
  }
  static float RowSum(const float* s) {
    __m256 sum = _mm256_setzero_ps();
    for (int64_t c = 0; c < kBk; c += 8) sum = _mm256_add_ps(sum, _mm256_loadu_ps(s + c));
    return HSum(sum);
  }
  static void Scale(float* o, int64_t n, float c) {
    const __m256 cv = _mm256_set1_ps(c);
    for (int64_t d = 0; d < n; d += 8) _mm256_storeu_ps(o + d, _mm256_mul_ps(_mm256_loadu_ps(o + d), cv));
  }
};

}  // namespace

void BidirectionalAttentionAvx2(const float* q, const float* k, const float* v, const uint8_t* key_valid,
                                const BatchAttentionShape& s, float* out, ThreadPool* pool) {
  flash::Attention<Avx2Tiles>(q, k, v, key_valid, s, out, pool);
}

void GeluTanhAvx2(float* x, int64_t n) {
  // 0.5·x·(1 + tanh(u)) = x / (1 + exp(-2u)) = x / (1 + exp2(-2·log2(e)·u)), u = β(x + κx³).
  const float kBeta = static_cast<float>(M_SQRT2 * M_2_SQRTPI * 0.5);
  const __m256 c1 = _mm256_set1_ps(-2.0f * 1.4426950408889634f * kBeta);
  const __m256 kappa = _mm256_set1_ps(0.044715f), one = _mm256_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 inner = _mm256_mul_ps(_mm256_fmadd_ps(_mm256_mul_ps(kappa, v), _mm256_mul_ps(v, v), v), c1);
    _mm256_storeu_ps(x + i, _mm256_div_ps(v, _mm256_add_ps(one, Exp2(inner))));
  }
  if (i < n) GeluTanhInPlace(x + i, n - i);
}

}  // namespace phi4mm::vision_internal
