// The float matmul tile (f32, bf16 and f16 weights x f32 activations), written once with Highway:
// each per-ISA kernel table file that includes it (quant_kernels_avx2.cc, quant_kernels_neon.cc)
// compiles it for its own target, N float lanes per vector (8 on AVX2, 4 on NEON). A tile holds R
// weight rows x A activation rows of accumulators and walks the columns 8 at a time: each weight
// slice is widened once (bf16: zero-extend and shift, f16: vcvtph2ps / fcvtl) and reused for the A
// activation rows; with 4 lanes two accumulators per pair keep the two halves of the slice. GEMV
// (A == 1) prefetches the next tile like the block formats: the LoRA B factors' rows are only
// 512-640 bytes long. The shapes are the tables' (quant_kernels_*.cc). Internal linkage: include
// only from src/phi4mm/kernels/quant_kernels_<isa>.cc.
#pragma once

#include <hwy/highway.h>

#include <cstdint>
#include <cstring>

#include "phi4mm/kernels/half_hwy-inl.h"
#include "phi4mm/kernels/quant_kernels.h"
#include "phi4mm/kernels/tile_common.h"

HWY_BEFORE_NAMESPACE();
namespace phi4mm::HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;

// A weight row's elements as floats: Load(row, k) the N from column k, At(row, k) one.
struct F32Rows {
  static constexpr int kBytes = 4;
  template <class D>
  static hn::VFromD<D> Load(D d, const uint8_t* row, int64_t k) {
    return hn::LoadU(d, reinterpret_cast<const float*>(row) + k);
  }
  static float At(const uint8_t* row, int64_t k) { return reinterpret_cast<const float*>(row)[k]; }
};
struct Bf16Rows {
  static constexpr int kBytes = 2;
  template <class D>
  static hn::VFromD<D> Load(D d, const uint8_t* row, int64_t k) {
    const hn::Rebind<hwy::bfloat16_t, D> db;
    return hn::PromoteTo(d, hn::LoadU(db, reinterpret_cast<const hwy::bfloat16_t*>(row) + k));
  }
  static float At(const uint8_t* row, int64_t k) {
    const uint32_t bits = static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(row)[k]) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
};
struct F16Rows {
  static constexpr int kBytes = 2;
  template <class D>
  static hn::VFromD<D> Load(D d, const uint8_t* row, int64_t k) {
    const hn::Rebind<hwy::float16_t, D> dh;
    return hn::PromoteTo(d, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(row) + k));
  }
  static float At(const uint8_t* row, int64_t k) { return HalfToFloat(reinterpret_cast<const uint16_t*>(row)[k]); }
};

template <class L>
struct FloatTile {
  template <int R, int A>
  static void Run(const TileArgs& t) {
    using D = hn::ScalableTag<float>;
    using V = hn::Vec<D>;
    const D d;
    constexpr int64_t N = static_cast<int64_t>(hn::MaxLanes(D()));
    constexpr int S = static_cast<int>(8 / N);  // vectors per 8-column step
    static_assert(HWY_HAVE_SCALABLE == 0 && 8 % N == 0, "the tile assumes 4 or 8 float lanes");
    V acc[R][A][S];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int i = 0; i < A; ++i)
#pragma GCC unroll 2
        for (int s = 0; s < S; ++s) acc[r][i][s] = hn::Zero(d);
    const float* x[A];
#pragma GCC unroll 4
    for (int i = 0; i < A; ++i) x[i] = reinterpret_cast<const float*>(t.a + i * t.a_stride);
    const int64_t k8 = t.cols & ~int64_t{7};
    const TilePrefetch pf(t, R, R * 32 * L::kBytes);
    for (int64_t k = 0; k < k8; k += 8) {
      if (A == 1 || t.prefetch) {
        if (k % 32 == 0) pf.At(k / 32);
      }
      V w[R][S];
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
        for (int s = 0; s < S; ++s) w[r][s] = L::Load(d, t.w + r * t.w_stride, k + s * N);
#pragma GCC unroll 4
      for (int i = 0; i < A; ++i)
#pragma GCC unroll 2
        for (int s = 0; s < S; ++s) {
          const V xv = hn::LoadU(d, x[i] + k + s * N);
#pragma GCC unroll 4
          for (int r = 0; r < R; ++r) acc[r][i][s] = hn::MulAdd(w[r][s], xv, acc[r][i][s]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int i = 0; i < A; ++i) {
        V sum = acc[r][i][0];
#pragma GCC unroll 2
        for (int s = 1; s < S; ++s) sum = hn::Add(sum, acc[r][i][s]);
        float y = hn::GetLane(hn::SumOfLanes(d, sum));
        for (int64_t k = k8; k < t.cols; ++k) y += L::At(t.w + r * t.w_stride, k) * x[i][k];
        Store(t, r, i, y);
      }
  }
};

}  // namespace
}  // namespace phi4mm::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();
