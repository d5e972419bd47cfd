// The NEON table with the ARMv8.2 dot-product instructions (compiled with
// -march=armv8.2-a+dotprod; reached through KernelsFor(Isa::kNeonDot) only when the CPU reports
// asimddp). It is the plain NEON table (quant_kernels_neon.cc) with the two integer tiles replaced:
//  - Q8_0 x A8: two sdot per block and weight/activation row pair (16 int8 products into each
//    int32 lane), one convert and fmla per block with the product of the two scales.
//  - Q4_K x A8K: sdot's 4-byte groups are exactly the interleaved layout's sub-block lanes
//    (quant.h: in 16 consecutive positions lane l is sub-block l, or l + 4 in the second half of a
//    32-position group), so per block two int32x4 accumulators (sub-blocks 0-3, 4-7) take 8 sdot
//    each on the unpacked nibbles, exact, and the float tail is the plain table's.
// Everything here but the table accessor has internal linkage (see neon_tile.h).
#include <arm_neon.h>

#include "phi4mm/kernels/neon_tile.h"
#include "phi4mm/kernels/quant.h"
#include "phi4mm/kernels/quant_kernels.h"

namespace phi4mm {

namespace {

using neon::Store;
using neon::Tile;

inline float HalfToFloat(uint16_t h) {
  return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
}

struct Q8DotImpl {
  template <int R, int N>
  static void Run(const TileArgs& t) {
    float32x4_t acc[R][N];
    for (int r = 0; r < R; ++r)
      for (int i = 0; i < N; ++i) acc[r][i] = vdupq_n_f32(0.0f);
    const BlockQ8_0* w[R];
    const BlockA8* a[N];
    for (int r = 0; r < R; ++r) w[r] = reinterpret_cast<const BlockQ8_0*>(t.w + r * t.w_stride);
    for (int i = 0; i < N; ++i) a[i] = reinterpret_cast<const BlockA8*>(t.a + i * t.a_stride);
    const int64_t nb = CeilDiv(t.cols, kQ8Block);
    const TilePrefetch pf(t, R, 2 * R * static_cast<int64_t>(sizeof(BlockQ8_0)));
    for (int64_t b = 0; b < nb; ++b) {
      if (N == 1 || t.prefetch) {
        if (b % 2 == 0) pf.At(b / 2);
      }
      for (int r = 0; r < R; ++r) {
        const int8x16_t w0 = vld1q_s8(w[r][b].qs), w1 = vld1q_s8(w[r][b].qs + 16);
        const float dw = HalfToFloat(w[r][b].d);
        for (int i = 0; i < N; ++i) {
          int32x4_t p = vdotq_s32(vdupq_n_s32(0), w0, vld1q_s8(a[i][b].qs));
          p = vdotq_s32(p, w1, vld1q_s8(a[i][b].qs + 16));
          acc[r][i] = vfmaq_n_f32(acc[r][i], vcvtq_f32_s32(p), dw * a[i][b].d);
        }
      }
    }
    for (int r = 0; r < R; ++r)
      for (int i = 0; i < N; ++i) Store(t, r, i, vaddvq_f32(acc[r][i]));
  }
};

struct Q4KDotImpl {
  template <int R, int N>
  static void Run(const TileArgs& t) {
    float32x4_t acc[R][N];
    for (int r = 0; r < R; ++r)
      for (int i = 0; i < N; ++i) acc[r][i] = vdupq_n_f32(0.0f);
    const BlockQ4K* w[R];
    const BlockA8K* a[N];
    for (int r = 0; r < R; ++r) w[r] = reinterpret_cast<const BlockQ4K*>(t.w + r * t.w_stride);
    for (int i = 0; i < N; ++i) a[i] = reinterpret_cast<const BlockA8K*>(t.a + i * t.a_stride);
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    const int64_t nb = CeilDiv(t.cols, kQ4KBlock);
    const TilePrefetch pf(t, R, R * static_cast<int64_t>(sizeof(BlockQ4K)));
    for (int64_t b = 0; b < nb; ++b) {
      if (N == 1 || t.prefetch) pf.At(b);
      int32x4_t s_lo[R][N], s_hi[R][N];  // int32 sums of sub-blocks 0-3 and 4-7
      for (int r = 0; r < R; ++r)
        for (int i = 0; i < N; ++i) s_lo[r][i] = s_hi[r][i] = vdupq_n_s32(0);
      for (int c = 0; c < 4; ++c) {
        for (int r = 0; r < R; ++r) {
          const uint8x16_t b0 = vld1q_u8(w[r][b].qs + c * 32), b1 = vld1q_u8(w[r][b].qs + c * 32 + 16);
          const int8x16_t lo0 = vreinterpretq_s8_u8(vandq_u8(b0, m4)), lo1 = vreinterpretq_s8_u8(vandq_u8(b1, m4));
          const int8x16_t hi0 = vreinterpretq_s8_u8(vshrq_n_u8(b0, 4)), hi1 = vreinterpretq_s8_u8(vshrq_n_u8(b1, 4));
          for (int i = 0; i < N; ++i) {
            const int8_t* aq = a[i][b].qs + c * 64;
            s_lo[r][i] = vdotq_s32(vdotq_s32(s_lo[r][i], lo0, vld1q_s8(aq)), hi0, vld1q_s8(aq + 32));
            s_hi[r][i] = vdotq_s32(vdotq_s32(s_hi[r][i], lo1, vld1q_s8(aq + 16)), hi1, vld1q_s8(aq + 48));
          }
        }
      }
      float32x4_t dsc_lo[R], dsc_hi[R], dmn_lo[R], dmn_hi[R];
      for (int r = 0; r < R; ++r) {
        const uint16x8_t sc = vmovl_u8(vld1_u8(w[r][b].scales)), mn = vmovl_u8(vld1_u8(w[r][b].mins));
        const float d = HalfToFloat(w[r][b].d), dmin = HalfToFloat(w[r][b].dmin);
        dsc_lo[r] = vmulq_n_f32(vcvtq_f32_u32(vmovl_u16(vget_low_u16(sc))), d);
        dsc_hi[r] = vmulq_n_f32(vcvtq_f32_u32(vmovl_high_u16(sc)), d);
        dmn_lo[r] = vmulq_n_f32(vcvtq_f32_u32(vmovl_u16(vget_low_u16(mn))), dmin);
        dmn_hi[r] = vmulq_n_f32(vcvtq_f32_u32(vmovl_high_u16(mn)), dmin);
      }
      for (int i = 0; i < N; ++i) {
        const int16x8_t bs = vld1q_s16(a[i][b].bsums);
        const float32x4_t bs_lo = vcvtq_f32_s32(vmovl_s16(vget_low_s16(bs)));
        const float32x4_t bs_hi = vcvtq_f32_s32(vmovl_high_s16(bs));
        for (int r = 0; r < R; ++r) {
          const float32x4_t v_lo = vmlsq_f32(vmulq_f32(vcvtq_f32_s32(s_lo[r][i]), dsc_lo[r]), dmn_lo[r], bs_lo);
          const float32x4_t v_hi = vmlsq_f32(vmulq_f32(vcvtq_f32_s32(s_hi[r][i]), dsc_hi[r]), dmn_hi[r], bs_hi);
          acc[r][i] = vfmaq_n_f32(acc[r][i], vaddq_f32(v_lo, v_hi), a[i][b].d);
        }
      }
    }
    for (int r = 0; r < R; ++r)
      for (int i = 0; i < N; ++i) Store(t, r, i, vaddvq_f32(acc[r][i]));
  }
};

MatMulKernels MakeNeonDot() {
  MatMulKernels k = quant_internal::NeonKernels();
  k.name = "neondot";
  k.tile[static_cast<int>(WeightFormat::kQ8_0)] = &Tile<Q8DotImpl>;
  k.tile[static_cast<int>(WeightFormat::kQ4K)] = &Tile<Q4KDotImpl>;
  // Q4_K: 2 R*N int32 sums + R*N float accumulators + 4 unpacked vectors: 4 x 3 fits 32 registers.
  // Unmeasured (no ARM machine here), chosen by register count.
  k.shape[static_cast<int>(WeightFormat::kQ8_0)] = {4, 4, 4, 2, 4};
  k.shape[static_cast<int>(WeightFormat::kQ4K)] = {4, 4, 3, 2, 4};
  return k;
}

}  // namespace

const MatMulKernels& quant_internal::NeonDotKernels() {
  static const MatMulKernels k = MakeNeonDot();
  return k;
}

}  // namespace phi4mm
