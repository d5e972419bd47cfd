// NEON kernels behind the vision operators of vision_ops.h on aarch64 (compiled with
// -march=armv8-a, the baseline; reached through VisionKernelsFor for the neon and neondot ISAs):
// flash-style bidirectional attention and the tanh-GELU, the same algorithm as the AVX2 file
// (vision_ops_avx2.cc) with 4-wide vectors. Attention works per (sequence, head): the valid keys
// are packed once, transposed in blocks of kBk keys (K^T [hdp, kBk] per block, hdp = head_dim
// rounded up to 8 with zeros) and V as [keys, hdp]; then for each block of up to kBq queries
// (pre-scaled by scale * log2(e), so the softmax uses exp2) it walks the key blocks with an online
// softmax: S = Q K^T by 6x16 register tiles (24 accumulators of AArch64's 32 vector registers),
// running row max and sum, O rescaled and accumulated by P V in 4x(W*4) tiles. exp2 is the AVX2
// file's range-reduced degree-7 polynomial (relative error ~2e-7 over the clamped [-126, 126]).
#include <arm_neon.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "phi4mm/kernels/vision_ops.h"

namespace phi4mm::vision_internal {

namespace {

constexpr int64_t kBq = 48;        // queries per block (a multiple of 6 and of 4)
constexpr int64_t kBk = 64;        // keys per block (a multiple of 16)
constexpr int64_t kRowGroup = 12;  // query rows are processed in multiples of this

// 2^x for x in [-126, 126] (clamped): x = n + f with n = round(x), |f| <= 0.5; 2^f by its Taylor
// series to degree 7; 2^n through the exponent bits.
inline float32x4_t Exp2(float32x4_t x) {
  x = vminq_f32(vmaxq_f32(x, vdupq_n_f32(-126.0f)), vdupq_n_f32(126.0f));
  const float32x4_t n = vrndnq_f32(x);
  const float32x4_t f = vmulq_n_f32(vsubq_f32(x, n), 0.6931471805599453f);  // f * ln 2
  float32x4_t p = vdupq_n_f32(1.0f / 5040.0f);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 720.0f), p, f);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 120.0f), p, f);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 24.0f), p, f);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 6.0f), p, f);
  p = vfmaq_f32(vdupq_n_f32(0.5f), p, f);
  p = vfmaq_f32(vdupq_n_f32(1.0f), p, f);
  p = vfmaq_f32(vdupq_n_f32(1.0f), p, f);
  const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtnq_s32_f32(n), vdupq_n_s32(127)), 23);
  return vmulq_f32(p, vreinterpretq_f32_s32(e));
}

// s[r * kBk + c] = sum_d q[r * hdp + d] * kt[d * kBk + c] for 6 rows and 16 columns.
inline void ScoreTile6x16(const float* q, const float* kt, int64_t hdp, float* s) {
  float32x4_t a[6][4];
  for (int r = 0; r < 6; ++r)
    for (int c = 0; c < 4; ++c) a[r][c] = vdupq_n_f32(0.0f);
  for (int64_t d = 0; d < hdp; ++d) {
    float32x4_t k[4];
    for (int c = 0; c < 4; ++c) k[c] = vld1q_f32(kt + d * kBk + 4 * c);
    for (int r = 0; r < 6; ++r) {
      const float qv = q[r * hdp + d];
      for (int c = 0; c < 4; ++c) a[r][c] = vfmaq_n_f32(a[r][c], k[c], qv);
    }
  }
  for (int r = 0; r < 6; ++r)
    for (int c = 0; c < 4; ++c) vst1q_f32(s + r * kBk + 4 * c, a[r][c]);
}

// o[r * hdp + w*4 ..] += sum_j p[r * kBk + j] * v[j * hdp + w*4 ..] for 4 rows, W vectors of 4
// columns, j < nk.
template <int W>
inline void AccumulateTile4(const float* p, const float* v, int64_t hdp, int64_t nk, float* o) {
  float32x4_t a[4][W];
  for (int r = 0; r < 4; ++r)
    for (int w = 0; w < W; ++w) a[r][w] = vld1q_f32(o + r * hdp + w * 4);
  for (int64_t j = 0; j < nk; ++j) {
    float32x4_t vv[W];
    for (int w = 0; w < W; ++w) vv[w] = vld1q_f32(v + j * hdp + w * 4);
    for (int r = 0; r < 4; ++r) {
      const float pj = p[r * kBk + j];
      for (int w = 0; w < W; ++w) a[r][w] = vfmaq_n_f32(a[r][w], vv[w], pj);
    }
  }
  for (int r = 0; r < 4; ++r)
    for (int w = 0; w < W; ++w) vst1q_f32(o + r * hdp + w * 4, a[r][w]);
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
        float32x4_t mx = vdupq_n_f32(-INFINITY);
        for (int64_t c = 0; c < kBk; c += 4) mx = vmaxq_f32(mx, vld1q_f32(s + c));
        const float m_new = std::max(w.m[r], vmaxvq_f32(mx));
        const float32x4_t mv = vdupq_n_f32(m_new);
        for (int64_t c = 0; c < kBk; c += 4) vst1q_f32(s + c, Exp2(vsubq_f32(vld1q_f32(s + c), mv)));
        // Padded key columns come out as the clamped 2^-126, not 0; they must not count.
        for (int64_t c = valid; c < kBk; ++c) s[c] = 0.0f;
        float32x4_t sum = vdupq_n_f32(0.0f);
        for (int64_t c = 0; c < kBk; c += 4) sum = vaddq_f32(sum, vld1q_f32(s + c));
        const float corr = w.m[r] == -INFINITY ? 0.0f : std::exp2(w.m[r] - m_new);
        w.l[r] = w.l[r] * corr + vaddvq_f32(sum);
        w.m[r] = m_new;
        if (corr != 1.0f) {
          float* o = w.o.data() + r * hdp;
          for (int64_t d = 0; d < hdp; d += 4) vst1q_f32(o + d, vmulq_n_f32(vld1q_f32(o + d), corr));
        }
      }
      const float* vblk = w.v.data() + blk * kBk * hdp;
      for (int64_t r = 0; r < nqp; r += 4) {
        const float* p = w.s.data() + r * kBk;
        float* o = w.o.data() + r * hdp;
        int64_t d = 0;
        for (; d + 24 <= hdp; d += 24) AccumulateTile4<6>(p, vblk + d, hdp, valid, o + d);
        if (hdp - d == 16) AccumulateTile4<4>(p, vblk + d, hdp, valid, o + d);
        if (hdp - d == 8) AccumulateTile4<2>(p, vblk + d, hdp, valid, o + d);
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

void BidirectionalAttentionNeon(const float* q, const float* k, const float* v, const uint8_t* key_valid,
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

void GeluTanhNeon(float* x, int64_t n) {
  // 0.5·x·(1 + tanh(u)) = x / (1 + exp(-2u)) = x / (1 + exp2(-2·log2(e)·u)), u = β(x + κx³).
  const float kBeta = static_cast<float>(M_SQRT2 * M_2_SQRTPI * 0.5);
  const float c1 = -2.0f * 1.4426950408889634f * kBeta;
  const float32x4_t one = vdupq_n_f32(1.0f);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const float32x4_t v = vld1q_f32(x + i);
    const float32x4_t inner = vmulq_n_f32(vfmaq_f32(v, vmulq_n_f32(v, 0.044715f), vmulq_f32(v, v)), c1);
    vst1q_f32(x + i, vdivq_f32(v, vaddq_f32(one, Exp2(inner))));
  }
  if (i < n) GeluTanhInPlace(x + i, n - i);
}

}  // namespace phi4mm::vision_internal
