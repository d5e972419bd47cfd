// The NEON table with the ARMv8.2 dot-product instructions (compiled with
// -march=armv8.2-a+dotprod; reached through KernelsFor(Isa::kNeonDot) only when the CPU reports
// asimddp). It is the plain NEON table (quant_kernels_neon.cc) with the two integer tiles replaced:
//  - Q8_0 x A8, over weights in eight-block groups (WeightLayout::kQ8Groups, repacked at load, as
//    the x86 vpdpbusd tables read them) and A8Group activations: block k of a group in 32-bit lane k
//    (k < 4 in the first vector of a 32-byte step, k >= 4 in the second), so per group and (weight
//    row, activation row) 16 sdot leave the eight block sums in two int32x4, and the float tail
//    (two converts, two scale products, two FMAs) runs once per eight blocks.
//  - Q4_K x A8K: sdot's 4-byte groups are exactly the interleaved layout's sub-block lanes
//    (quant.h: in 16 consecutive positions lane l is sub-block l, or l + 4 in the second half of a
//    32-position group), so per block two int32x4 accumulators (sub-blocks 0-3, 4-7) take 8 sdot
//    each on the unpacked nibbles, exact, and the float tail is the plain table's.
// Everything here but the table accessor has internal linkage (see neon_tile.h).
#include <arm_neon.h>

#include <cstring>

#include "phi4mm/kernels/neon_tile.h"
#include "phi4mm/kernels/quant.h"
#include "phi4mm/kernels/quant_kernels.h"

namespace phi4mm {

namespace {

using neon::Tile;

inline float HalfToFloat(uint16_t h) {
  return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
}

// Q8_0 x A8Group with sdot over the eight-block groups (quant.h). The stored values are q + 128
// (unsigned, for x86's vpdpbusd); one eor per weight vector gives back q as int8 for sdot, so the
// activations' start (-128 * sum(a), which x86 needs) is not used. A row's last group of m < 8
// blocks has 4m-byte step vectors and m scales, the row's last 2m bytes. Its lanes k >= m meet
// zero activation blocks of scale 0, so whatever bytes they load add nothing: each step loads
// its 32 bytes in place when they lie inside the row (its neighbours' bytes fill the lanes above m),
// else (the last steps of a row under 256 values) copies the 4m bytes word by word into a zeroed
// buffer. The scales are the 16 bytes that end at the row's end, moved down to lane 0 by a table
// lookup that zeroes the lanes above m (a stray f16 infinity there would make 0 * inf). Per group
// and (weight row, activation row): 16 sdot + 6 float operations per 256 multiply-adds, against 16
// sdot + 24 float and scalar operations (a convert, a scalar scale product and an fmla per block,
// each block's f16 scales converted) for the plain-row tile this replaced. Live registers: 2*R*N
// sums, R*N accumulators and 2*R weight vectors.
struct Q8GroupDotImpl {
  template <int R, int N, bool kFull>
  static void Step(const uint8_t* const (&w)[R], const quant_internal::A8Group* const (&a)[N], int64_t g,
                   int64_t nb, float32x4_t (&acc)[R][N]) {
    const int64_t m = kFull ? kQ8Group : nb - g * kQ8Group;
    const int64_t row_bytes = nb * static_cast<int64_t>(sizeof(BlockQ8_0));
    const uint8x16_t flip = vdupq_n_u8(0x80);
    int32x4_t lo[R][N], hi[R][N];
    for (int r = 0; r < R; ++r)
      for (int i = 0; i < N; ++i) lo[r][i] = hi[r][i] = vdupq_n_s32(0);
    for (int s = 0; s < 8; ++s) {
      for (int r = 0; r < R; ++r) {
        const int64_t at = g * 256 + 4 * m * s;
        const uint8_t* values = w[r] + at;
        uint8x16_t v0, v1;
        if (kFull || at + 32 <= row_bytes) {
          v0 = vld1q_u8(values);
          v1 = vld1q_u8(values + 16);
        } else {
          alignas(16) uint32_t part[8] = {};
          for (int64_t k = 0; k < m; ++k) std::memcpy(&part[k], values + 4 * k, 4);
          v0 = vreinterpretq_u8_u32(vld1q_u32(part));
          v1 = vreinterpretq_u8_u32(vld1q_u32(part + 4));
        }
        const int8x16_t w0 = vreinterpretq_s8_u8(veorq_u8(v0, flip)), w1 = vreinterpretq_s8_u8(veorq_u8(v1, flip));
        for (int i = 0; i < N; ++i) {
          const int8_t* aq = a[i][g].qs + 32 * s;
          lo[r][i] = vdotq_s32(lo[r][i], w0, vld1q_s8(aq));
          hi[r][i] = vdotq_s32(hi[r][i], w1, vld1q_s8(aq + 16));
        }
      }
    }
    float32x4_t dw_lo[R], dw_hi[R];
    for (int r = 0; r < R; ++r) {
      const uint8_t* scales = w[r] + nb * kQ8Block + g * 16;
      uint8x16_t d16;
      if (kFull) {
        d16 = vld1q_u8(scales);
      } else {
        // Byte j < 2m takes tail[16 - 2m + j]; the others index 0xFF, which the lookup reads as 0.
        const uint8x16_t j = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
        const uint8x16_t keep = vcltq_u8(j, vdupq_n_u8(static_cast<uint8_t>(2 * m)));
        const uint8x16_t from = vaddq_u8(j, vdupq_n_u8(static_cast<uint8_t>(16 - 2 * m)));
        d16 = vqtbl1q_u8(vld1q_u8(scales + 2 * m - 16), vorrq_u8(vandq_u8(keep, from), vmvnq_u8(keep)));
      }
      const float16x8_t h = vreinterpretq_f16_u8(d16);
      dw_lo[r] = vcvt_f32_f16(vget_low_f16(h));
      dw_hi[r] = vcvt_high_f32_f16(h);
    }
    for (int i = 0; i < N; ++i) {
      const float32x4_t da_lo = vld1q_f32(a[i][g].d), da_hi = vld1q_f32(a[i][g].d + 4);
      for (int r = 0; r < R; ++r) {
        acc[r][i] = vfmaq_f32(acc[r][i], vcvtq_f32_s32(lo[r][i]), vmulq_f32(dw_lo[r], da_lo));
        acc[r][i] = vfmaq_f32(acc[r][i], vcvtq_f32_s32(hi[r][i]), vmulq_f32(dw_hi[r], da_hi));
      }
    }
  }

  template <int R, int N>
  static void Run(const TileArgs& t) {
    float32x4_t acc[R][N];
    for (int r = 0; r < R; ++r)
      for (int i = 0; i < N; ++i) acc[r][i] = vdupq_n_f32(0.0f);
    const uint8_t* w[R];
    const quant_internal::A8Group* a[N];
    for (int r = 0; r < R; ++r) w[r] = t.w + r * t.w_stride;
    for (int i = 0; i < N; ++i) a[i] = reinterpret_cast<const quant_internal::A8Group*>(t.a + i * t.a_stride);
    const int64_t nb = CeilDiv(t.cols, kQ8Block), full = nb / kQ8Group;
    const TilePrefetch pf(t, R, kQ8Group * R * static_cast<int64_t>(sizeof(BlockQ8_0)));
    for (int64_t g = 0; g < full; ++g) {
      if (N == 1 || t.prefetch) pf.At(g);
      Step<R, N, true>(w, a, g, nb, acc);
    }
    if (nb % kQ8Group != 0) Step<R, N, false>(w, a, full, nb, acc);
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
  k.tile[static_cast<int>(WeightFormat::kQ8_0)] = &Tile<Q8GroupDotImpl>;
  k.layout[static_cast<int>(WeightFormat::kQ8_0)] = WeightLayout::kQ8Groups;
  k.pack_a8 = &quant_internal::PackA8Groups;
  k.packed_a8_row_bytes = &quant_internal::PackedA8GroupRowBytes;
  k.tile[static_cast<int>(WeightFormat::kQ4K)] = &Tile<Q4KDotImpl>;
  // Unmeasured (no ARM machine here), chosen by register count (32 vector registers). Q8_0: 2 R*N
  // int32 sums + R*N float accumulators + 2 R weight vectors, so 2 x 4 (28). Q4_K: 2 R*N int32
  // sums + R*N float accumulators + 4 unpacked vectors: 4 x 3 fits.
  k.shape[static_cast<int>(WeightFormat::kQ8_0)] = {2, 2, 4, 2, 4};
  k.shape[static_cast<int>(WeightFormat::kQ4K)] = {4, 4, 3, 2, 4};
  return k;
}

}  // namespace

const MatMulKernels& quant_internal::NeonDotKernels() {
  static const MatMulKernels k = MakeNeonDot();
  return k;
}

}  // namespace phi4mm
