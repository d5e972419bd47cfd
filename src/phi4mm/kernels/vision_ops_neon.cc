// NEON kernels behind the vision operators of vision_ops.h on aarch64 (compiled with
// -march=armv8-a, the baseline; reached through VisionKernelsFor for the neon and neondot ISAs):
// the register tiles of the flash-style bidirectional attention (flash_attention.h, the algorithm
// the AVX2 file runs too: S = Q K^T by 6x16 tiles, 24 of AArch64's 32 vector registers as
// accumulators; P V by 4x24) and the tanh-GELU, with 4-wide vectors. exp2 is neon_exp.h's.
#include <arm_neon.h>

#include <cmath>

#include "phi4mm/kernels/flash_attention.h"
#include "phi4mm/kernels/neon_exp.h"
#include "phi4mm/kernels/vision_ops.h"

namespace phi4mm::vision_internal {

namespace {

using neon::Exp2;

// The register tiles and row operations flash::Attention runs on.
struct NeonTiles {
  static constexpr int64_t kBk = flash::kBk;
  static void ScoreTile6x16(const float* q, const float* kt, int64_t hdp, float* s) {
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
  // o[r * hdp + c] += sum_j p[r * kBk + j] * v[j * hdp + c] for 4 rows and the first Cols columns
  // (8, 16 or 24: W = Cols / 4 vectors), j < nk.
  template <int Cols>
  static void Accumulate(const float* p, const float* v, int64_t hdp, int64_t nk, float* o) {
    constexpr int W = Cols / 4;
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
  static float RowMax(const float* s) {
    float32x4_t mx = vdupq_n_f32(-INFINITY);
    for (int64_t c = 0; c < kBk; c += 4) mx = vmaxq_f32(mx, vld1q_f32(s + c));
    return vmaxvq_f32(mx);
  }
  static void Exp2Row(float* s, float m) {
    const float32x4_t mv = vdupq_n_f32(m);
    for (int64_t c = 0; c < kBk; c += 4) vst1q_f32(s + c, Exp2(vsubq_f32(vld1q_f32(s + c), mv)));
  }
  static float RowSum(const float* s) {
    float32x4_t sum = vdupq_n_f32(0.0f);
    for (int64_t c = 0; c < kBk; c += 4) sum = vaddq_f32(sum, vld1q_f32(s + c));
    return vaddvq_f32(sum);
  }
  static void Scale(float* o, int64_t n, float c) {
    for (int64_t d = 0; d < n; d += 4) vst1q_f32(o + d, vmulq_n_f32(vld1q_f32(o + d), c));
  }
};

}  // namespace

void BidirectionalAttentionNeon(const float* q, const float* k, const float* v, const uint8_t* key_valid,
                                const BatchAttentionShape& s, float* out, ThreadPool* pool) {
  flash::Attention<NeonTiles>(q, k, v, key_valid, s, out, pool);
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
