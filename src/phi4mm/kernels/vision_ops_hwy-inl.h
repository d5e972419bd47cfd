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

  // c[r * ldc + j] (+)= sum_k a[r * lda + k] * b[k * ldb + j] for r < R, j < Cols, k < n: R x Cols/N
  // accumulators, each b slice loaded once for the R rows, each a element broadcast once for the
  // Cols columns. kLoad starts from c's values, otherwise from zero.
  template <int R, int Cols, bool kLoad>
  static void RowTile(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t n, float* c, int64_t ldc) {
    const D d;
    constexpr size_t W = Cols / N;
    hn::Vec<D> acc[R][W];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
      for (size_t w = 0; w < W; ++w) acc[r][w] = kLoad ? hn::LoadU(d, c + r * ldc + w * N) : hn::Zero(d);
    for (int64_t k = 0; k < n; ++k) {
      hn::Vec<D> bv[W];
#pragma GCC unroll 8
      for (size_t w = 0; w < W; ++w) bv[w] = hn::LoadU(d, b + k * ldb + w * N);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const auto ab = hn::Set(d, a[r * lda + k]);
#pragma GCC unroll 8
        for (size_t w = 0; w < W; ++w) acc[r][w] = hn::MulAdd(ab, bv[w], acc[r][w]);
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
      for (size_t w = 0; w < W; ++w) hn::StoreU(acc[r][w], d, c + r * ldc + w * N);
  }
  // s[r*kBk + c] = sum_d q[r*hdp + d] * kt[d*kBk + c], 6 rows, 16 columns.
  static void ScoreTile6x16(const float* q, const float* kt, int64_t hdp, float* s) {
    RowTile<6, 16, false>(q, hdp, kt, kBk, hdp, s, kBk);
  }
  // o[r * hdp + c] += sum_j p[r * kBk + j] * v[j * hdp + c] for 4 rows and the first Cols columns
  // (8, 16 or 24), j < nk.
  template <int Cols>
  static void Accumulate(const float* p, const float* v, int64_t hdp, int64_t nk, float* o) {
    RowTile<4, Cols, true>(p, kBk, v, hdp, nk, o, hdp);
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
