// AVX2 + FMA kernels behind the vision operators of vision_ops.h (compiled with -mavx2 -mfma -mf16c;
// reached only through the dispatch in vision_ops.cc when the CPU has them): flash-style
// bidirectional attention and the tanh-GELU. Attention works per (sequence, head): the valid keys
// are packed once, transposed in blocks of kBk keys (K^T [hdp, kBk] per block, hdp = head_dim
// rounded up to 8 with zeros) and V as [keys, hdp]; then for each block of up to kBq queries
// (pre-scaled by scale * log2(e), so the softmax uses exp2) it walks the key blocks with an online
// softmax: S = Q K^T by 6x16 register tiles, running row max and sum, O rescaled and accumulated
// by P V in 4x24 register tiles. exp2 is a range-reduced degree-7 polynomial (relative error
// ~2e-7 over the clamped range [-126, 126]).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "phi4mm/kernels/avx2_reduce.h"
#include "phi4mm/kernels/vision_ops.h"

namespace phi4mm::vision_internal {

namespace {

constexpr int64_t kBq = 48;  // queries per block (a multiple of 6 and of 4)
constexpr int64_t kBk = 64;  // keys per block (a multiple of 16)
constexpr int64_t kRowGroup = 12;  // query rows are processed in multiples of this

// 2^x for x in [-126, 126] (clamped): x = n + f with n = round(x), |f| <= 0.5; 2^f by its Taylor
// series to degree 7; 2^n through the exponent bits.
inline __m256 Exp2(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-126.0f)), _mm256_set1_ps(126.0f));
  const __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_mul_ps(_mm256_sub_ps(x, n), _mm256_set1_ps(0.6931471805599453f));  // f * ln 2
  __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f / 720.0f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

inline float HMax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

using avx2::HSum;

// s[r * kBk + c] = sum_d q[r * hdp + d] * kt[d * kBk + c] for 6 rows and 16 columns.
inline void ScoreTile6x16(const float* q, const float* kt, int64_t hdp, float* s) {
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

// o[r * hdp + w*8 ..] += sum_j p[r * kBk + j] * v[j * hdp + w*8 ..] for 4 rows, W vectors of 8
// columns, j < nk.
template <int W>
inline void AccumulateTile4(const float* p, const float* v, int64_t hdp, int64_t nk, float* o) {
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

struct Scratch {
  std::vector<int64_t> keys;
  std::vector<float> kt, v, q, s, o, m, l;
};

// One (sequence b, head h) of BidirectionalAttention.
void AttendHead(const float* q, const float* k, const float* v, const uint8_t* key_valid,
                const BatchAttentionShape& sh, int64_t b, int64_t h, Scratch& w, float* out) {
  const int64_t S = sh.seq, hd = sh.head_dim, width = sh.n_heads * hd, hdp = (hd + 7) / 8 * 8;
  w.keys.clear();
  for (int64_t j = 0; j < S; ++j)
    if (key_valid == nullptr || key_valid[b * S + j] != 0) w.keys.push_back(j);
  if (w.keys.empty())
    for (int64_t j = 0; j < S; ++j) w.keys.push_back(j);
  const int64_t nk = static_cast<int64_t>(w.keys.size()), nkb = (nk + kBk - 1) / kBk;

  // K^T per key block: kt[(blk * hdp + d) * kBk + c]; V: v[j * hdp + d]; zeros past hd and nk.
  w.kt.assign(static_cast<size_t>(nkb * hdp * kBk), 0.0f);
  w.v.assign(static_cast<size_t>(nkb * kBk * hdp), 0.0f);
  const float* kb = k + b * S * width + h * hd;
  const float* vb = v + b * S * width + h * hd;
  for (int64_t j = 0; j < nk; ++j) {
    const float* kr = kb + w.keys[j] * width;
    float* kt = w.kt.data() + (j / kBk) * hdp * kBk + j % kBk;
    for (int64_t d = 0; d < hd; ++d) kt[d * kBk] = kr[d];
    std::copy(vb + w.keys[j] * width, vb + w.keys[j] * width + hd, w.v.data() + j * hdp);
  }

  w.q.resize(static_cast<size_t>(kBq * hdp));
  w.s.resize(static_cast<size_t>(kBq * kBk));
  w.o.resize(static_cast<size_t>(kBq * hdp));
  w.m.resize(static_cast<size_t>(kBq));
  w.l.resize(static_cast<size_t>(kBq));
  const float qscale = sh.scale * 1.4426950408889634f;  // exp(x) = exp2(x * log2(e))
  for (int64_t i0 = 0; i0 < S; i0 += kBq) {
    const int64_t nq = std::min(kBq, S - i0), nqp = (nq + kRowGroup - 1) / kRowGroup * kRowGroup;
    std::fill(w.q.begin(), w.q.end(), 0.0f);
    for (int64_t r = 0; r < nq; ++r) {
      const float* qr = q + (b * S + i0 + r) * width + h * hd;
      for (int64_t d = 0; d < hd; ++d) w.q[r * hdp + d] = qr[d] * qscale;
    }
    std::fill(w.o.begin(), w.o.end(), 0.0f);
    std::fill(w.m.begin(), w.m.end(), -INFINITY);
    std::fill(w.l.begin(), w.l.end(), 0.0f);
    for (int64_t blk = 0; blk < nkb; ++blk) {
      const float* kt = w.kt.data() + blk * hdp * kBk;
      const int64_t valid = std::min(kBk, nk - blk * kBk);
      for (int64_t r = 0; r < nqp; r += 6)
        for (int64_t c = 0; c < kBk; c += 16) ScoreTile6x16(w.q.data() + r * hdp, kt + c, hdp, w.s.data() + r * kBk + c);
      // Online softmax: p = exp2(s - m_new), l = l * exp2(m - m_new) + sum p, o *= exp2(m - m_new).
      for (int64_t r = 0; r < nqp; ++r) {
        float* s = w.s.data() + r * kBk;
        for (int64_t c = valid; c < kBk; ++c) s[c] = -INFINITY;
        __m256 mx = _mm256_set1_ps(-INFINITY);
        for (int64_t c = 0; c < kBk; c += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(s + c));
        const float m_new = std::max(w.m[r], HMax(mx));
        const __m256 mv = _mm256_set1_ps(m_new);
        for (int64_t c = 0; c < kBk; c += 8)
          _mm256_storeu_ps(s + c, Exp2(_mm256_sub_ps(_mm256_loadu_ps(s + c), mv)));
        // Padded key columns come out as the clamped 2^-126, not 0; they must not count.
        for (int64_t c = valid; c < kBk; ++c) s[c] = 0.0f;
        __m256 sum = _mm256_setzero_ps();
        for (int64_t c = 0; c < kBk; c += 8) sum = _mm256_add_ps(sum, _mm256_loadu_ps(s + c));
        const float corr = w.m[r] == -INFINITY ? 0.0f : std::exp2(w.m[r] - m_new);
        w.l[r] = w.l[r] * corr + HSum(sum);
        w.m[r] = m_new;
        if (corr != 1.0f) {
          const __m256 cv = _mm256_set1_ps(corr);
          float* o = w.o.data() + r * hdp;
          for (int64_t d = 0; d < hdp; d += 8) _mm256_storeu_ps(o + d, _mm256_mul_ps(_mm256_loadu_ps(o + d), cv));
        }
      }
      const float* vblk = w.v.data() + blk * kBk * hdp;
      for (int64_t r = 0; r < nqp; r += 4) {
        const float* p = w.s.data() + r * kBk;
        float* o = w.o.data() + r * hdp;
        int64_t d = 0;
        for (; d + 24 <= hdp; d += 24) AccumulateTile4<3>(p, vblk + d, hdp, valid, o + d);
        if (hdp - d == 16) AccumulateTile4<2>(p, vblk + d, hdp, valid, o + d);
        if (hdp - d == 8) AccumulateTile4<1>(p, vblk + d, hdp, valid, o + d);
      }
    }
    for (int64_t r = 0; r < nq; ++r) {
      float* dst = out + (b * S + i0 + r) * width + h * hd;
      const float inv = 1.0f / w.l[r];
      for (int64_t d = 0; d < hd; ++d) dst[d] = w.o[r * hdp + d] * inv;
    }
  }
}

}  // namespace

void BidirectionalAttentionAvx2(const float* q, const float* k, const float* v, const uint8_t* key_valid,
                                const BatchAttentionShape& s, float* out, ThreadPool* pool) {
  const int64_t tasks = s.batch * s.n_heads;
  auto run = [&](int64_t t0, int64_t t1) {
    Scratch w;
    for (int64_t t = t0; t < t1; ++t) AttendHead(q, k, v, key_valid, s, t / s.n_heads, t % s.n_heads, w, out);
  };
  if (pool) {
    pool->ParallelFor(tasks, run, 1);
  } else {
    run(0, tasks);
  }
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
