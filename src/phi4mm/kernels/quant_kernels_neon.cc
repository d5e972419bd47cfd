// The NEON kernel table for aarch64 CPUs without the dot-product instructions (compiled with
// -march=armv8-a, the aarch64 baseline; reached through KernelsFor(Isa::kNeon)). The dot-product
// table (quant_kernels_neondot.cc) starts from this one and replaces the two integer tiles.
//  - f32/bf16/f16 weights x f32 activations: float_tile_hwy-inl.h's tile (Highway, shared with the
//    AVX2 table), R weight rows x N activation rows of 4-wide fmla accumulators, two per pair so a
//    row walks 8 columns per step, each weight vector widened once (bf16: shift left 16, f16: fcvtl).
//  - Q8_0 x A8: smull / smull2 (int8 x int8 -> int16, |p| <= 127 * 127) and sadalp into int32
//    lanes, one convert and fmla per block with the product of the two scales.
//  - Q4_K x A8K on the interleaved block order (quant.h): in 16 consecutive positions, 32-bit lane
//    l holds 4 weights of sub-block l (or l + 4 in the second half of a 32-position group). The
//    nibbles (0..15) multiply the int8 activations with smull / smlal into int16 lanes: per block
//    each lane sums 8 products of at most 15 * 127, |sum| <= 15240 < 32767, exact. Pairwise adds
//    then give one int32 lane per sub-block, and the float tail is the AVX2 table's:
//    acc += (isum * (d*sc) - (dmin*mn) * bsum) * da.
// Activation rows are quantized by the scalar reference (bit-identical by definition).
#include <arm_neon.h>

#include "phi4mm/kernels/neon_tile.h"
#include "phi4mm/kernels/float_tile_hwy-inl.h"
#include "phi4mm/kernels/quant.h"
#include "phi4mm/kernels/quant_kernels.h"

namespace phi4mm {

namespace {

using neon::Tile;

inline float HalfToFloat(uint16_t h) {
  return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
}

// The exact int32 lanes of a 32-element int8 dot product: lane l sums bytes 2l, 2l+1 of each
// 8-byte quarter (so the total of the 4 lanes is the dot product).
inline int32x4_t Dot32(int8x16_t w0, int8x16_t w1, int8x16_t a0, int8x16_t a1) {
  int32x4_t s = vpaddlq_s16(vmull_s8(vget_low_s8(w0), vget_low_s8(a0)));
  s = vpadalq_s16(s, vmull_high_s8(w0, a0));
  s = vpadalq_s16(s, vmull_s8(vget_low_s8(w1), vget_low_s8(a1)));
  return vpadalq_s16(s, vmull_high_s8(w1, a1));
}

struct Q8Impl {
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
          const int32x4_t p = Dot32(w0, w1, vld1q_s8(a[i][b].qs), vld1q_s8(a[i][b].qs + 16));
          acc[r][i] = vfmaq_n_f32(acc[r][i], vcvtq_f32_s32(p), dw * a[i][b].d);
        }
      }
    }
    for (int r = 0; r < R; ++r)
      for (int i = 0; i < N; ++i) Store(t, r, i, vaddvq_f32(acc[r][i]));
  }
};

struct Q4KImpl {
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
      // s[q]: int16 sums of the 8-byte quarter q of a 32-position group: q = 0, 1 sub-blocks 0-3,
      // q = 2, 3 sub-blocks 4-7 (two sub-blocks per quarter).
      int16x8_t s[R][N][4];
      for (int c = 0; c < 4; ++c) {
        for (int r = 0; r < R; ++r) {
          const uint8x16_t b0 = vld1q_u8(w[r][b].qs + c * 32), b1 = vld1q_u8(w[r][b].qs + c * 32 + 16);
          // Positions c*64 + [0,16), [16,32) (low nibbles) and + [32,48), [48,64) (high nibbles).
          const int8x16_t lo0 = vreinterpretq_s8_u8(vandq_u8(b0, m4)), lo1 = vreinterpretq_s8_u8(vandq_u8(b1, m4));
          const int8x16_t hi0 = vreinterpretq_s8_u8(vshrq_n_u8(b0, 4)), hi1 = vreinterpretq_s8_u8(vshrq_n_u8(b1, 4));
          for (int i = 0; i < N; ++i) {
            const int8_t* aq = a[i][b].qs + c * 64;
            const int8x16_t a0 = vld1q_s8(aq), a1 = vld1q_s8(aq + 16), a2 = vld1q_s8(aq + 32), a3 = vld1q_s8(aq + 48);
            int16x8_t* q = s[r][i];
            if (c == 0) {
              q[0] = vmull_s8(vget_low_s8(lo0), vget_low_s8(a0));
              q[1] = vmull_high_s8(lo0, a0);
              q[2] = vmull_s8(vget_low_s8(lo1), vget_low_s8(a1));
              q[3] = vmull_high_s8(lo1, a1);
            } else {
              q[0] = vmlal_s8(q[0], vget_low_s8(lo0), vget_low_s8(a0));
              q[1] = vmlal_high_s8(q[1], lo0, a0);
              q[2] = vmlal_s8(q[2], vget_low_s8(lo1), vget_low_s8(a1));
              q[3] = vmlal_high_s8(q[3], lo1, a1);
            }
            q[0] = vmlal_s8(q[0], vget_low_s8(hi0), vget_low_s8(a2));
            q[1] = vmlal_high_s8(q[1], hi0, a2);
            q[2] = vmlal_s8(q[2], vget_low_s8(hi1), vget_low_s8(a3));
            q[3] = vmlal_high_s8(q[3], hi1, a3);
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
          const int16x8_t* q = s[r][i];
          // (sub0, sub0, sub1, sub1) + (sub2, sub2, sub3, sub3) pairwise -> (sub0, sub1, sub2, sub3).
          const int32x4_t lo = vpaddq_s32(vpaddlq_s16(q[0]), vpaddlq_s16(q[1]));
          const int32x4_t hi = vpaddq_s32(vpaddlq_s16(q[2]), vpaddlq_s16(q[3]));
          const float32x4_t v_lo = vmlsq_f32(vmulq_f32(vcvtq_f32_s32(lo), dsc_lo[r]), dmn_lo[r], bs_lo);
          const float32x4_t v_hi = vmlsq_f32(vmulq_f32(vcvtq_f32_s32(hi), dsc_hi[r]), dmn_hi[r], bs_hi);
          acc[r][i] = vfmaq_n_f32(acc[r][i], vaddq_f32(v_lo, v_hi), a[i][b].d);
        }
      }
    }
    for (int r = 0; r < R; ++r)
      for (int i = 0; i < N; ++i) Store(t, r, i, vaddvq_f32(acc[r][i]));
  }
};

void QuantA8(const float* x, int64_t cols, void* out) { QuantizeRowA8(x, cols, static_cast<BlockA8*>(out)); }
void QuantA8K(const float* x, int64_t cols, void* out) { QuantizeRowA8K(x, cols, static_cast<BlockA8K*>(out)); }

MatMulKernels MakeNeon() {
  MatMulKernels k;
  k.name = "neon";
  k.tile[static_cast<int>(WeightFormat::kF32)] = &Tile<HWY_NAMESPACE::FloatTile<HWY_NAMESPACE::F32Rows>>;
  k.tile[static_cast<int>(WeightFormat::kBF16)] = &Tile<HWY_NAMESPACE::FloatTile<HWY_NAMESPACE::Bf16Rows>>;
  k.tile[static_cast<int>(WeightFormat::kF16)] = &Tile<HWY_NAMESPACE::FloatTile<HWY_NAMESPACE::F16Rows>>;
  k.tile[static_cast<int>(WeightFormat::kQ8_0)] = &Tile<Q8Impl>;
  k.tile[static_cast<int>(WeightFormat::kQ4K)] = &Tile<Q4KImpl>;
  // 32 vector registers: 4 x 4 tiles fit (Q4_K: 16 x 4 int16 sums would not, so 2 x 4 / 4 x 2;
  // the shapes are unmeasured, chosen by register count: see docs/benchmarks.md).
  for (int f : {0, 1, 2}) k.shape[f] = {4, 3, 4, 3, 4};
  k.shape[static_cast<int>(WeightFormat::kQ8_0)] = {4, 4, 4, 2, 4};
  k.shape[static_cast<int>(WeightFormat::kQ4K)] = {4, 2, 2, 2, 2};
  k.quantize_a8 = &QuantA8;
  k.quantize_a8k = &QuantA8K;
  return k;
}

}  // namespace

const MatMulKernels& quant_internal::NeonKernels() {
  static const MatMulKernels k = MakeNeon();
  return k;
}

}  // namespace phi4mm
