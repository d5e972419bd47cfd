// The SIMD row kernels of CausalAttention (attention.h's RowKernels), written once with Highway:
// each per-ISA file that includes it (attention_avx2.cc, attention_neon.cc) compiles it for its own
// target, N float lanes per vector (8 on AVX2 with its 16 registers, 4 on NEON with 32), and every
// register tile below is sized in columns, so the same source keeps the same number of registers
// busy on both.
//
// Decode: scores take four cached rows at a time against up to three query heads (twelve
// independent accumulators); the weighted sum walks the cached rows in blocks that stay in L1 and
// keeps 32 output columns of up to three heads in registers; half rows are widened (vcvtph2ps,
// fcvtl) and int8 rows converted (vpmovsxbd + vcvtdq2ps, sxtl + scvtf) as they are loaded, the q8
// row scale folded into the score or the weight. Flash tiles: the key/value tile is widened to
// float32 once; Q·Kᵀ runs 4 query rows x 3 keys (12 accumulators, reduced four at a time), the
// softmax uses a vectorised exp (Cody-Waite range reduction and a degree-5 polynomial, ~1 ulp),
// and P·V keeps 4 rows x 16 output columns in registers over the tile (on AVX2, 4 x 24 and 2 x 48
// measured slower). Internal linkage: include only from src/phi4mm/kernels/attention_<isa>.cc.
#pragma once

#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "phi4mm/base/half.h"
#include "phi4mm/kernels/attention.h"
#include "phi4mm/kernels/exp_hwy-inl.h"
#include "phi4mm/kernels/half_hwy-inl.h"

HWY_BEFORE_NAMESPACE();
namespace phi4mm::HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;

using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;
constexpr int64_t N = static_cast<int64_t>(hn::MaxLanes(D()));
static_assert(HWY_HAVE_SCALABLE == 0 && (N == 4 || N == 8), "the tiles assume 4 or 8 float lanes");
using D4 = hn::CappedTag<float, 4>;  // four scores
using V4 = hn::Vec<D4>;

// N elements of a cached row as floats: float rows as they are, half rows widened, int8 rows
// converted (the q8 row scale is applied by the caller).
HWY_INLINE V LoadRow(const float* p) { return hn::LoadU(D(), p); }
HWY_INLINE V LoadRow(const uint16_t* p) {
  const hn::Rebind<hwy::float16_t, D> dh;
  return hn::PromoteTo(D(), hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
}
HWY_INLINE V LoadRow(const int8_t* p) {
  const hn::Rebind<int8_t, D> d8;
  const hn::RebindToSigned<D> di;
  return hn::ConvertTo(D(), hn::PromoteTo(di, hn::LoadU(d8, p)));
}
inline float Load1(const float* p) { return *p; }
inline float Load1(const uint16_t* p) { return HalfToFloat(*p); }
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

// The four sums of a0..a3 (lane i = the sum of ai's lanes), per 128-bit block by interleaving
// (pairs of lanes, then pairs of pairs), then the blocks added: 11 single-cycle shuffles and adds on
// AVX2 (where two levels of vhaddps cost about as much), 6 on NEON.
template <class VT>  // V (a template, so that only the branch for this N below is compiled)
HWY_INLINE V4 HSum4(VT a0, VT a1, VT a2, VT a3) {
  const D d;
  const hn::Repartition<double, D> dd;
  const V s01 = hn::Add(hn::InterleaveLower(d, a0, a1), hn::InterleaveUpper(d, a0, a1));
  const V s23 = hn::Add(hn::InterleaveLower(d, a2, a3), hn::InterleaveUpper(d, a2, a3));
  const auto w01 = hn::BitCast(dd, s01), w23 = hn::BitCast(dd, s23);
  const VT x = hn::Add(hn::BitCast(d, hn::InterleaveLower(dd, w01, w23)), hn::BitCast(d, hn::InterleaveUpper(dd, w01, w23)));
  if constexpr (N == 8) {
    const hn::Half<D> dh;
    return hn::Add(hn::LowerHalf(dh, x), hn::UpperHalf(dh, x));
  } else {
    return x;
  }
}

HWY_INLINE float HSum(V v) { return hn::GetLane(hn::SumOfLanes(D(), v)); }

// Asks for the cache lines of one head's part of a cached row (hd elements). The decode path
// reads a head's rows `stride` apart, and a batch of sequences keeps the whole KV cache out of the
// last-level cache, so the rows a few steps ahead are requested while the current ones are used.
template <typename E>
inline void PrefetchRow(const E* row, int64_t hd) {
  const char* p = reinterpret_cast<const char*>(row);
  for (int64_t off = 0; off < hd * static_cast<int64_t>(sizeof(E)); off += 64) hwy::Prefetch(p + off);
}
constexpr int64_t kPrefetchRows = 8;  // how far ahead ScoresG asks for rows

// Row t's factor times the score scale, for rows t..t+3 as the lanes of one vector.
template <typename E>
HWY_INLINE V4 Factors4(const uint8_t* sc, int64_t t, int64_t stride, float scale) {
  const D4 d4;
  if constexpr (std::is_same_v<E, int8_t>) {
    alignas(16) const float f[4] = {Factor<E>(sc, t, stride), Factor<E>(sc, t + 1, stride), Factor<E>(sc, t + 2, stride),
                                    Factor<E>(sc, t + 3, stride)};
    return hn::Mul(hn::Load(d4, f), hn::Set(d4, scale));
  } else {
    return hn::Set(d4, scale);
  }
}

// G query heads (G <= 3) against rows t..t+3: 4·G independent FMA chains (12 for a group of 3
// heads: on AVX2 all 16 registers with the heads' query slices), so the FMA latency is covered, and
// per head one HSum4 turns the four rows' accumulators into four scores. The loops over rows and
// heads are unrolled by pragma: otherwise GCC keeps the accumulators on the stack. Two rows at a
// time with a horizontal sum per (row, head) was half as fast in L2 (AVX2: 13.7 against 26.4 GB/s
// of half K rows, one thread, 4096 rows of a group of 3).
template <int G, typename E>
HWY_INLINE void ScoresTile4(const float* q, const E* k, const uint8_t* sc, int64_t stride, int64_t hd, float scale,
                            float* s, int64_t len, int64_t t) {
  const D d;
  V acc[4][G];
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r)
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) acc[r][g] = hn::Zero(d);
  int64_t e = 0;
  for (; e + N <= hd; e += N) {
    V qv[G];
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) qv[g] = hn::LoadU(d, q + g * hd + e);
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
      const V kv = LoadRow(k + (t + r) * stride + e);
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) acc[r][g] = hn::MulAdd(qv[g], kv, acc[r][g]);
    }
  }
  const V4 f = Factors4<E>(sc, t, stride, scale);
  const D4 d4;
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g) {
    V4 x = HSum4(acc[0][g], acc[1][g], acc[2][g], acc[3][g]);  // rows t..t+3
    if (e < hd) {
      alignas(16) float tail[4] = {0, 0, 0, 0};
      for (int r = 0; r < 4; ++r)
        for (int64_t c = e; c < hd; ++c) tail[r] += q[g * hd + c] * Load1(k + (t + r) * stride + c);
      x = hn::Add(x, hn::Load(d4, tail));
    }
    hn::StoreU(hn::Mul(x, f), d4, s + g * len + t);
  }
}

// G query heads against one row t (the last len % 4 rows).
template <int G, typename E>
inline void ScoresRow(const float* q, const E* k, const uint8_t* sc, int64_t stride, int64_t hd, float scale, float* s,
                      int64_t len, int64_t t) {
  const D d;
  const float f = scale * Factor<E>(sc, t, stride);
  for (int g = 0; g < G; ++g) {
    V acc = hn::Zero(d);
    int64_t e = 0;
    for (; e + N <= hd; e += N) acc = hn::MulAdd(hn::LoadU(d, q + g * hd + e), LoadRow(k + t * stride + e), acc);
    float sum = HSum(acc);
    for (; e < hd; ++e) sum += q[g * hd + e] * Load1(k + t * stride + e);
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

// f(std::integral_constant<int, Gc>, g0) for the groups of up to three query heads g0..g0+Gc of G:
// the decode kernels' tiles take the group size as a template parameter.
template <class F>
HWY_INLINE void ForHeadGroups(int G, F&& f) {
  for (int g0 = 0; g0 < G; g0 += 3) {
    switch (std::min(3, G - g0)) {
      case 1: f(std::integral_constant<int, 1>(), g0); break;
      case 2: f(std::integral_constant<int, 2>(), g0); break;
      default: f(std::integral_constant<int, 3>(), g0); break;
    }
  }
}

template <typename E>
void Scores(const float* q, int G, const E* k, const uint8_t* sc, int64_t stride, int64_t len, int64_t hd,
            float scale, float* s) {
  ForHeadGroups(G, [&](auto gc, int g0) {
    ScoresG<decltype(gc)::value>(q + g0 * hd, k, sc, stride, len, hd, scale, s + g0 * len);
  });
}

// out[g][d0..d0+N·C) += sum_t p[g][t] * f_t * v_t[d0..d0+N·C) for t in [t0, t1), g < G (query
// heads here; the flash tile's query rows in TilePv, f_t = 1 for float rows): G·C independent
// FMA chains, each cached slice widened once for all G heads. 32 columns with a group of three
// heads (AVX2: 12 accumulators, the three weights and one widened slice, all 16 registers; NEON: 24
// accumulators of its 32) cover the FMA latency, which 16 columns (six chains on AVX2) did not.
// Loops unrolled by pragma so the accumulators stay in registers.
template <int G, int C, typename E>
HWY_INLINE void AccumCols(const float* p, int64_t ldp, const E* v, const uint8_t* sc, int64_t stride, int64_t t0,
                          int64_t t1, int64_t hd, int64_t d0, float* out) {
  const D d;
  V acc[G][C];
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[g][c] = hn::LoadU(d, out + g * hd + d0 + N * c);
  for (int64_t t = t0; t < t1; ++t) {
    const float f = Factor<E>(sc, t, stride);
    V w[G];
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) w[g] = hn::Set(d, p[g * ldp + t] * f);
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const V vv = LoadRow(v + t * stride + d0 + N * c);
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) acc[g][c] = hn::MulAdd(w[g], vv, acc[g][c]);
    }
  }
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) hn::StoreU(acc[g][c], d, out + g * hd + d0 + N * c);
}

template <int G, typename E>
void AccumG(const float* p, int64_t ldp, const E* v, const uint8_t* sc, int64_t stride, int64_t len, int64_t hd,
            float* out) {
  constexpr int64_t kBlock = 64;  // cached rows per pass over the output columns
  constexpr int kC = static_cast<int>(32 / N);  // vectors of output columns per pass (G <= 3)
  for (int64_t t0 = 0; t0 < len; t0 += kBlock) {
    const int64_t t1 = std::min(len, t0 + kBlock);
    // The first block's rows, then each next block's while this one is summed.
    if (t0 == 0)
      for (int64_t a = t0; a < t1; ++a) PrefetchRow(v + a * stride, hd);
    for (int64_t a = t1; a < std::min(len, t1 + kBlock); ++a) PrefetchRow(v + a * stride, hd);
    int64_t d = 0;
    for (; d + N * kC <= hd; d += N * kC) AccumCols<G, kC>(p, ldp, v, sc, stride, t0, t1, hd, d, out);
    for (; d + N <= hd; d += N) AccumCols<G, 1>(p, ldp, v, sc, stride, t0, t1, hd, d, out);
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
  ForHeadGroups(G, [&](auto gc, int g0) {
    AccumG<decltype(gc)::value>(p + g0 * ldp, ldp, v, sc, stride, len, hd, out + g0 * hd);
  });
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

// Round to nearest even, as the scalar F32ToF16 (vcvtps2ph with an immediate rounding mode; fcvtn).
void ToF16(const float* x, int64_t n, uint16_t* out) {
  const D d;
  const hn::Rebind<hwy::float16_t, D> dh;
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::DemoteTo(dh, hn::LoadU(d, x + i)), dh, reinterpret_cast<hwy::float16_t*>(out + i));
  for (; i < n; ++i) out[i] = F32ToF16(x[i]);
}

template <typename E>
void Widen(const E* k, const uint8_t* sc, int64_t stride, int64_t n, int64_t hd, int64_t hdp, float* dst) {
  const D d;
  for (int64_t t = 0; t < n; ++t) {
    const E* src = k + t * stride;
    float* o = dst + t * hdp;
    const float f = Factor<E>(sc, t, stride);
    const V fv = hn::Set(d, f);
    int64_t e = 0;
    for (; e + N <= hd; e += N) {
      if constexpr (std::is_same_v<E, int8_t>) hn::StoreU(hn::Mul(LoadRow(src + e), fv), d, o + e);
      else hn::StoreU(LoadRow(src + e), d, o + e);
    }
    for (; e < hd; ++e) o[e] = Load1(src + e) * f;
    for (; e < hdp; ++e) o[e] = 0.0f;
  }
}
void WidenF32(const float* k, int64_t stride, int64_t n, int64_t hd, int64_t hdp, float* dst) {
  Widen(k, nullptr, stride, n, hd, hdp, dst);
}
void WidenF16(const uint16_t* k, int64_t stride, int64_t n, int64_t hd, int64_t hdp, float* dst) {
  Widen(k, nullptr, stride, n, hd, hdp, dst);
}

// exp(x) for x <= 0 (the softmax's arguments); below -87 (including -inf) it returns 0. n =
// round(x·log2 e) lies in [-126, 0], so 2^n is exp_hwy-inl.h's Pow2I. (Its own degree-5
// polynomial, not exp_hwy-inl.h's Exp: the decoder's attention kept its numerics.)
HWY_INLINE V ExpNonPositive(V x) {
  const D d;
  const auto keep = hn::Ge(x, hn::Set(d, -87.0f));
  x = hn::Max(x, hn::Set(d, -87.0f));
  const V fx = hn::Round(hn::Mul(x, hn::Set(d, 1.44269504088896341f)));
  x = hn::NegMulAdd(fx, hn::Set(d, 0.693359375f), x);
  x = hn::NegMulAdd(fx, hn::Set(d, -2.12194440e-4f), x);
  V y = hn::Set(d, 1.9875691500e-4f);
  y = hn::MulAdd(y, x, hn::Set(d, 1.3981999507e-3f));
  y = hn::MulAdd(y, x, hn::Set(d, 8.3334519073e-3f));
  y = hn::MulAdd(y, x, hn::Set(d, 4.1665795894e-2f));
  y = hn::MulAdd(y, x, hn::Set(d, 1.6666665459e-1f));
  y = hn::MulAdd(y, x, hn::Set(d, 5.0000001201e-1f));
  y = hn::MulAdd(y, hn::Mul(x, x), hn::Add(x, hn::Set(d, 1.0f)));
  return hn::IfThenElseZero(keep, hn::Mul(y, Pow2I(d, fx)));
}

// Every score goes through ExpNonPositive and lane t % N of the sum, the last partial vector too
// (padded with -inf, whose exponential is 0): a row's result is the same whether its tile holds
// only its own keys or also masked ones past them (attention.cc's one algorithm per row).
void TileSoftmax(float* s, int64_t lds, int64_t rows, int64_t n, float* m, float* l, float* o, int64_t hdp) {
  const D d;
  const int64_t full = n / N * N, tail = n - full;
  alignas(64) float pad[N];
  for (int64_t r = 0; r < rows; ++r) {
    float* sr = s + r * lds;
    std::fill(pad, pad + N, -INFINITY);
    std::copy(sr + full, sr + n, pad);
    V mv = hn::Set(d, m[r]);
    for (int64_t t = 0; t < full; t += N) mv = hn::Max(mv, hn::LoadU(d, sr + t));
    if (tail > 0) mv = hn::Max(mv, hn::Load(d, pad));
    const float mx = hn::GetLane(hn::MaxOfLanes(d, mv));
    if (mx == -INFINITY) {
      std::fill(sr, sr + n, 0.0f);
      continue;
    }
    const V mxv = hn::Set(d, mx);
    V sum = hn::Zero(d);
    for (int64_t t = 0; t < full; t += N) {
      const V p = ExpNonPositive(hn::Sub(hn::LoadU(d, sr + t), mxv));
      hn::StoreU(p, d, sr + t);
      sum = hn::Add(sum, p);
    }
    if (tail > 0) {
      const V p = ExpNonPositive(hn::Sub(hn::Load(d, pad), mxv));
      hn::Store(p, d, pad);
      std::copy(pad, pad + tail, sr + full);
      sum = hn::Add(sum, p);
    }
    const float total = HSum(sum);
    const float alpha = std::exp(m[r] - mx);
    m[r] = mx;
    l[r] = l[r] * alpha + total;
    if (alpha != 1.0f) {
      const V av = hn::Set(d, alpha);
      for (int64_t e = 0; e < hdp; e += N) hn::StoreU(hn::Mul(av, hn::LoadU(d, o + r * hdp + e)), d, o + r * hdp + e);
    }
  }
}

// N values of a cached row as Widen writes them (the q8 row scale multiplied in).
template <typename E>
HWY_INLINE V Widened(const E* src, V fv) {
  if constexpr (std::is_same_v<E, int8_t>) return hn::Mul(LoadRow(src), fv);
  else return LoadRow(src);
}

// Query rows r0..r0+4 against cached rows t..t+K (K = 1..3), each value as Widen writes it (a
// widened tile is the float case with stride hdp); hdp is a multiple of 8 (attention.h).
template <int K, typename E>
HWY_INLINE void QkMicroFrom(const float* q, const E* k, const uint8_t* sc, int64_t stride, int64_t hdp, float* s,
                            int64_t lds, int64_t t) {
  const D d;
  V acc[4][K], fv[K];
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < K; ++j) acc[r][j] = hn::Zero(d);
#pragma GCC unroll 4
  for (int j = 0; j < K; ++j) fv[j] = hn::Set(d, Factor<E>(sc, t + j, stride));
  for (int64_t e = 0; e < hdp; e += N) {
    V kv[K];
#pragma GCC unroll 4
    for (int j = 0; j < K; ++j) kv[j] = Widened(k + (t + j) * stride + e, fv[j]);
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
      const V qv = hn::LoadU(d, q + r * hdp + e);
#pragma GCC unroll 4
      for (int j = 0; j < K; ++j) acc[r][j] = hn::MulAdd(qv, kv[j], acc[r][j]);
    }
  }
#pragma GCC unroll 4
  for (int j = 0; j < K; ++j) {
    alignas(16) float sums[4];
    hn::Store(HSum4(acc[0][j], acc[1][j], acc[2][j], acc[3][j]), D4(), sums);
    for (int r = 0; r < 4; ++r) s[r * lds + t + j] = sums[r];
  }
}

template <typename E>
void TileQkFrom(const float* q, int64_t rows, const E* k, const uint8_t* sc, int64_t stride, int64_t n, int64_t hdp,
                float* s, int64_t lds) {
  for (int64_t r = 0; r < rows; r += 4) {
    const float* qr = q + r * hdp;
    float* sr = s + r * lds;
    int64_t t = 0;
    for (; t + 3 <= n; t += 3) QkMicroFrom<3>(qr, k, sc, stride, hdp, sr, lds, t);
    if (n - t == 2) QkMicroFrom<2>(qr, k, sc, stride, hdp, sr, lds, t);
    else if (n - t == 1) QkMicroFrom<1>(qr, k, sc, stride, hdp, sr, lds, t);
  }
}

// o[r0..r0+4][d0..d0+N·C) += P · V over n cached rows, each value as Widen writes it (a widened
// tile is the float case with stride hdp): 4 query rows x 16 output columns (8 accumulators on
// AVX2, 16 on NEON). With the accumulators left as a stack array this loop was store-bound (1.4x
// slower on a Zen 1 EPYC); on AVX2 a 2 x 48 tile and 4 x 24 measured slower than 4 x 16.
template <int C, typename E>
HWY_INLINE void PvColsFrom(const float* p, int64_t ldp, const E* v, const uint8_t* sc, int64_t stride, int64_t n,
                           int64_t hdp, int64_t d0, float* o) {
  const D d;
  V acc[4][C];
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[r][c] = hn::LoadU(d, o + r * hdp + d0 + N * c);
  for (int64_t t = 0; t < n; ++t) {
    const V fv = hn::Set(d, Factor<E>(sc, t, stride));
    V w[4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) w[r] = hn::Set(d, p[r * ldp + t]);
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const V vv = Widened(v + t * stride + d0 + N * c, fv);
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) acc[r][c] = hn::MulAdd(w[r], vv, acc[r][c]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) hn::StoreU(acc[r][c], d, o + r * hdp + d0 + N * c);
}

template <typename E>
void TilePvFrom(const float* p, int64_t ldp, int64_t rows, const E* v, const uint8_t* sc, int64_t stride, int64_t n,
                int64_t hdp, float* o) {
  constexpr int kC = static_cast<int>(16 / N);
  for (int64_t r = 0; r < rows; r += 4) {
    int64_t e = 0;
    for (; e + 16 <= hdp; e += 16) PvColsFrom<kC>(p + r * ldp, ldp, v, sc, stride, n, hdp, e, o + r * hdp);
    for (; e < hdp; e += N) PvColsFrom<1>(p + r * ldp, ldp, v, sc, stride, n, hdp, e, o + r * hdp);
  }
}

// The flash tiles: the widened tile is float rows hdp apart; the direct ones (decode) read the
// cache, so both compute a row with the same instructions.
void TileQk(const float* q, int64_t rows, const float* k, int64_t n, int64_t hdp, float* s, int64_t lds) {
  TileQkFrom(q, rows, k, nullptr, hdp, n, hdp, s, lds);
}
void TilePv(const float* p, int64_t ldp, int64_t rows, const float* v, int64_t n, int64_t hdp, float* o) {
  TilePvFrom(p, ldp, rows, v, nullptr, hdp, n, hdp, o);
}
void TileQkF32(const float* q, int64_t rows, const float* k, int64_t stride, int64_t n, int64_t hdp, float* s,
               int64_t lds) {
  TileQkFrom(q, rows, k, nullptr, stride, n, hdp, s, lds);
}
void TileQkF16(const float* q, int64_t rows, const uint16_t* k, int64_t stride, int64_t n, int64_t hdp, float* s,
               int64_t lds) {
  TileQkFrom(q, rows, k, nullptr, stride, n, hdp, s, lds);
}
void TilePvF32(const float* p, int64_t ldp, int64_t rows, const float* v, int64_t stride, int64_t n, int64_t hdp,
               float* o) {
  TilePvFrom(p, ldp, rows, v, nullptr, stride, n, hdp, o);
}
void TilePvF16(const float* p, int64_t ldp, int64_t rows, const uint16_t* v, int64_t stride, int64_t n, int64_t hdp,
               float* o) {
  TilePvFrom(p, ldp, rows, v, nullptr, stride, n, hdp, o);
}

const attention_internal::RowKernels& Table() {
  static const attention_internal::RowKernels k{
      ScoresF32, ScoresF16, Scores<int8_t>, AccumF32,  AccumF16,          Accum<int8_t>,
      ToF16,     WidenF32,  WidenF16,       Widen<int8_t>, TileQk,        TileSoftmax,
      TilePv,    TileQkF32, TileQkF16,      TileQkFrom<int8_t>, TilePvF32, TilePvF16,
      TilePvFrom<int8_t>};
  return k;
}

}  // namespace
}  // namespace phi4mm::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();
