// The flash-style BidirectionalAttention of vision_ops.h, written once for the SIMD vision tables
// (vision_ops_hwy-inl.h, compiled by vision_ops_avx2.cc and vision_ops_neon.cc), which pass a
// `Simd` struct with their register tiles:
//   ScoreTile6x16(q, kt, hdp, s)   s[r*kBk + c] = Σ_d q[r*hdp + d]·kt[d*kBk + c], 6 rows, 16 columns
//   Accumulate<Cols>(p, v, hdp, nk, o)  o[r*hdp + d] += Σ_{j<nk} p[r*kBk + j]·v[j*hdp + d], 4 rows,
//                                  d < Cols (8, 16 or 24; AccumulateRows4 below covers all of hdp)
//   RowMax(s), RowSum(s)           over kBk values
//   Exp2Row(s, m)                  s[c] = 2^(s[c] − m) for kBk values
//   Scale(o, n, c)                 o[0..n) *= c (n a multiple of 8)
// Per (sequence, head) the valid keys are packed once, transposed in blocks of kBk keys (K^T
// [hdp, kBk] per block, hdp = head_dim rounded up to 8 with zeros) and V as [keys, hdp]; then each
// block of up to kBq queries (pre-scaled by scale·log2(e), so the softmax uses exp2) walks the key
// blocks with an online softmax: running row max and sum, O rescaled and accumulated by P·V.
// Everything here has internal linkage (an anonymous namespace), so each ISA file compiled with its
// own flags keeps its own copy (kernels/isa.h). Include only from src/phi4mm/kernels/vision_ops_*.cc.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "phi4mm/base/thread_pool.h"
#include "phi4mm/kernels/vision_ops.h"

namespace phi4mm::vision_internal::flash {
namespace {

constexpr int64_t kBq = 48;        // queries per block (a multiple of 6 and of 4)
constexpr int64_t kBk = 64;        // keys per block (a multiple of 16)
constexpr int64_t kRowGroup = 12;  // query rows are processed in multiples of this

struct Scratch {
  std::vector<int64_t> keys;
  std::vector<float> kt, v, q, s, o, m, l;
};

// o[r*hdp + d] += Σ_{j<nk} p[r*kBk + j]·v[j*hdp + d] for 4 rows and every d < hdp (a multiple of 8),
// in column slices of 24 that keep a 4-row tile's accumulators in registers.
template <class Simd>
void AccumulateRows4(const float* p, const float* v, int64_t hdp, int64_t nk, float* o) {
  int64_t d = 0;
  for (; d + 24 <= hdp; d += 24) Simd::template Accumulate<24>(p, v + d, hdp, nk, o + d);
  if (hdp - d == 16) Simd::template Accumulate<16>(p, v + d, hdp, nk, o + d);
  if (hdp - d == 8) Simd::template Accumulate<8>(p, v + d, hdp, nk, o + d);
}

// One (sequence b, head h) of BidirectionalAttention.
template <class Simd>
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
        for (int64_t c = 0; c < kBk; c += 16)
          Simd::ScoreTile6x16(w.q.data() + r * hdp, kt + c, hdp, w.s.data() + r * kBk + c);
      // Online softmax: p = exp2(s - m_new), l = l * exp2(m - m_new) + sum p, o *= exp2(m - m_new).
      for (int64_t r = 0; r < nqp; ++r) {
        float* s = w.s.data() + r * kBk;
        for (int64_t c = valid; c < kBk; ++c) s[c] = -INFINITY;
        const float m_new = std::max(w.m[r], Simd::RowMax(s));
        Simd::Exp2Row(s, m_new);
        // Padded key columns come out as the clamped 2^-126, not 0; they must not count.
        for (int64_t c = valid; c < kBk; ++c) s[c] = 0.0f;
        const float corr = w.m[r] == -INFINITY ? 0.0f : std::exp2(w.m[r] - m_new);
        w.l[r] = w.l[r] * corr + Simd::RowSum(s);
        w.m[r] = m_new;
        if (corr != 1.0f) Simd::Scale(w.o.data() + r * hdp, hdp, corr);
      }
      const float* vblk = w.v.data() + blk * kBk * hdp;
      for (int64_t r = 0; r < nqp; r += 4)
        AccumulateRows4<Simd>(w.s.data() + r * kBk, vblk, hdp, valid, w.o.data() + r * hdp);
    }
    for (int64_t r = 0; r < nq; ++r) {
      float* dst = out + (b * S + i0 + r) * width + h * hd;
      const float inv = 1.0f / w.l[r];
      for (int64_t d = 0; d < hd; ++d) dst[d] = w.o[r * hdp + d] * inv;
    }
  }
}

// BidirectionalAttention over all (sequence, head) pairs, split over `pool`.
template <class Simd>
void Attention(const float* q, const float* k, const float* v, const uint8_t* key_valid, const BatchAttentionShape& s,
               float* out, ThreadPool* pool) {
  const int64_t tasks = s.batch * s.n_heads;
  auto run = [&](int64_t t0, int64_t t1) {
    Scratch w;
    for (int64_t t = t0; t < t1; ++t) AttendHead<Simd>(q, k, v, key_valid, s, t / s.n_heads, t % s.n_heads, w, out);
  };
  if (pool) {
    pool->ParallelFor(tasks, run, 1);
  } else {
    run(0, tasks);
  }
}

}  // namespace
}  // namespace phi4mm::vision_internal::flash
