// The SIMD kernels behind the vision operators of vision_ops.h, written once with Highway: each
// per-ISA file that includes it (vision_ops_avx2.cc, vision_ops_neon.cc) compiles it for its own
// target, N float lanes per vector (8 on AVX2, 4 on NEON). They are the register tiles of the
// flash-style bidirectional attention (flash_attention.h: S = Q K^T by 6x16 tiles, 6·16/N
// accumulators, 12 on AVX2 and 24 of AArch64's 32 vector registers on NEON; P V by 4-row tiles of
// 8, 16 or 24 columns) and the tanh-GELU; 2^x is exp_hwy-inl.h's. Internal linkage: include only
// from src/phi4mm/kernels/vision_ops_<isa>.cc.
#pragma once

#include <hwy/highway.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "phi4mm/kernels/exp_hwy-inl.h"
#include "phi4mm/kernels/flash_attention.h"
#include "phi4mm/kernels/ops.h"
#include "phi4mm/kernels/vision_ops.h"

HWY_BEFORE_NAMESPACE();
namespace phi4mm::HWY_NAMESPACE {
namespace {

// The register tiles and row operations flash::Attention runs on.
struct VisionTiles {
  using D = hn::ScalableTag<float>;
  static constexpr size_t N = hn::MaxLanes(D());
  static constexpr int64_t kBk = vision_internal::flash::kBk;
  static_assert(HWY_HAVE_SCALABLE == 0 && 16 % N == 0 && 8 % N == 0, "the tiles assume 4 or 8 lanes");

  static void ScoreTile6x16(const float* q, const float* kt, int64_t hdp, float* s) {
    const D d;
    constexpr size_t C = 16 / N;
    hn::Vec<D> a[6][C];
#pragma GCC unroll 8
    for (int r = 0; r < 6; ++r)
#pragma GCC unroll 8
      for (size_t c = 0; c < C; ++c) a[r][c] = hn::Zero(d);
    for (int64_t k = 0; k < hdp; ++k) {
      hn::Vec<D> kv[C];
#pragma GCC unroll 8
      for (size_t c = 0; c < C; ++c) kv[c] = hn::LoadU(d, kt + k * kBk + c * N);
#pragma GCC unroll 8
      for (int r = 0; r < 6; ++r) {
        const auto qb = hn::Set(d, q[r * hdp + k]);
#pragma GCC unroll 8
        for (size_t c = 0; c < C; ++c) a[r][c] = hn::MulAdd(qb, kv[c], a[r][c]);
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < 6; ++r)
#pragma GCC unroll 8
      for (size_t c = 0; c < C; ++c) hn::StoreU(a[r][c], d, s + r * kBk + c * N);
  }
  // o[r * hdp + c] += sum_j p[r * kBk + j] * v[j * hdp + c] for 4 rows and the first Cols columns
  // (8, 16 or 24: W = Cols / N vectors), j < nk.
  template <int Cols>
  static void Accumulate(const float* p, const float* v, int64_t hdp, int64_t nk, float* o) {
    const D d;
    constexpr size_t W = Cols / N;
    hn::Vec<D> a[4][W];
#pragma GCC unroll 8
    for (int r = 0; r < 4; ++r)
#pragma GCC unroll 8
      for (size_t w = 0; w < W; ++w) a[r][w] = hn::LoadU(d, o + r * hdp + w * N);
    for (int64_t j = 0; j < nk; ++j) {
      hn::Vec<D> vv[W];
#pragma GCC unroll 8
      for (size_t w = 0; w < W; ++w) vv[w] = hn::LoadU(d, v + j * hdp + w * N);
#pragma GCC unroll 8
      for (int r = 0; r < 4; ++r) {
        const auto pb = hn::Set(d, p[r * kBk + j]);
#pragma GCC unroll 8
        for (size_t w = 0; w < W; ++w) a[r][w] = hn::MulAdd(pb, vv[w], a[r][w]);
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < 4; ++r)
#pragma GCC unroll 8
      for (size_t w = 0; w < W; ++w) hn::StoreU(a[r][w], d, o + r * hdp + w * N);
  }
  static float RowMax(const float* s) {
    const D d;
    auto mx = hn::Set(d, -INFINITY);
    for (int64_t c = 0; c < kBk; c += N) mx = hn::Max(mx, hn::LoadU(d, s + c));
    return hn::GetLane(hn::MaxOfLanes(d, mx));
  }
  static void Exp2Row(float* s, float m) {
    const D d;
    const auto mv = hn::Set(d, m);
    for (int64_t c = 0; c < kBk; c += N) hn::StoreU(Exp2(d, hn::Sub(hn::LoadU(d, s + c), mv)), d, s + c);
  }
  static float RowSum(const float* s) {
    const D d;
    auto sum = hn::Zero(d);
    for (int64_t c = 0; c < kBk; c += N) sum = hn::Add(sum, hn::LoadU(d, s + c));
    return hn::GetLane(hn::SumOfLanes(d, sum));
  }
  static void Scale(float* o, int64_t n, float c) {
    const D d;
    const auto cv = hn::Set(d, c);
    for (int64_t i = 0; i < n; i += N) hn::StoreU(hn::Mul(hn::LoadU(d, o + i), cv), d, o + i);
  }
};

void BidirectionalAttention(const float* q, const float* k, const float* v, const uint8_t* key_valid,
                            const BatchAttentionShape& s, float* out, ThreadPool* pool) {
  vision_internal::flash::Attention<VisionTiles>(q, k, v, key_valid, s, out, pool);
}

// 0.5·x·(1 + tanh(u)) = x / (1 + e^(-2u)) = x / (1 + 2^(-2·log2(e)·u)), u = β(x + κx³).
void GeluTanh(float* x, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const float kBeta = static_cast<float>(M_SQRT2 * M_2_SQRTPI * 0.5);
  const auto c1 = hn::Set(d, -2.0f * 1.4426950408889634f * kBeta);
  const auto kappa = hn::Set(d, 0.044715f), one = hn::Set(d, 1.0f);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto v = hn::LoadU(d, x + i);
    const auto inner = hn::Mul(hn::MulAdd(hn::Mul(kappa, v), hn::Mul(v, v), v), c1);
    hn::StoreU(hn::Div(v, hn::Add(one, Exp2(d, inner))), d, x + i);
  }
  if (i < n) phi4mm::GeluTanhInPlace(x + i, n - i);
}

}  // namespace
}  // namespace phi4mm::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();
