// Scalar reference quantizers and dequantizers of the block formats in quant.h. These define the
// formats: every SIMD kernel is tested against the values they produce.
#include "phi4mm/kernels/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "phi4mm/base/half.h"

namespace phi4mm {

namespace {

// The smallest f16 whose value is >= v (v >= 0, finite), so a scale never shrinks when rounded.
uint16_t F16AtLeast(float v) {
  uint16_t h = F32ToF16(v);
  while (F16ToF32(h) < v) ++h;
  return h;
}

// Copies block `b` of a row into `buf[block]`, zero-padding past the end of the row.
const float* PaddedBlock(const float* x, int64_t cols, int64_t b, int block, float* buf) {
  const int64_t start = b * block;
  if (start + block <= cols) return x + start;
  const int64_t have = cols - start;
  std::memcpy(buf, x + start, static_cast<size_t>(have) * sizeof(float));
  std::fill(buf + have, buf + block, 0.0f);
  return buf;
}

// std::nearbyint(v) for |v| <= 2^22 in the default rounding mode, without the library call that
// baseline x86-64 makes for it (nearbyintf must leave the floating-point environment as it found
// it, so it is not inlined without SSE4.1; the searched Q4_K quantizer calls it ~45 times per
// weight): v + 1.5 * 2^23 lies where float's spacing is 1, so the sum rounds v to an integer, ties
// to even, and subtracting the constant back is exact. Bit-identical to nearbyint there.
inline float RoundToInt(float v) {
  constexpr float kShift = 12582912.0f;  // 1.5 * 2^23
  return (v + kShift) - kShift;
}

// The level in [0, 15] whose value step * q - offset is nearest to x. (Clamping before rounding
// gives what rounding before clamping does: both ends are integers.)
int NearestLevel(float x, float step, float offset) {
  if (step <= 0.0f) return 0;
  return static_cast<int>(RoundToInt(std::clamp((x + offset) / step, 0.0f, 15.0f)));
}

// The integer in [0, 255] nearest to v / unit.
int RoundedSteps(float v, float unit) {
  if (v <= 0.0f || unit <= 0.0f) return 0;
  return static_cast<int>(RoundToInt(std::min(255.0f, v / unit)));
}

// One Q4_K sub-block's affine grid: weight x is stored as the level q in [0, 15] nearest to it
// and read back as step * q - offset. The format stores offset >= 0 only.
struct SubBlockFit {
  float step = 0.0f;
  float offset = 0.0f;
};

// The grid of 32 weights with the least squared error sum_i (x_i - (step * q_i - offset))^2.
// Plain min/max rounding wastes levels on a lone outlier; instead, each candidate grid stretches
// the min..max range by (15 + t) / 15 for t in -1..1 in steps of 0.1, its levels are fixed by
// rounding, and step and offset are then solved by least squares for those levels (offset clamped
// at 0, which re-solves the step alone). The candidate with the least error wins; min/max itself
// is one of them, so the fit is never worse than plain rounding before the scales are stored.
// Measured on the trained fixture (docs/quant-quality.md): weighting the error by |x| or x^2, a
// finer or wider grid, or iterating the least squares gave no lower KL divergence than this.
SubBlockFit FitSubBlock(const float* x) {
  constexpr int n = kQ4KSub;
  float lo = 0.0f, hi = x[0];
  for (int i = 0; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  SubBlockFit best;
  if (hi <= lo) return best;  // an all-zero sub-block (lo <= 0 <= hi always)
  auto error_of = [&](float step, float offset) {
    float e = 0.0f;
    for (int i = 0; i < n; ++i) {
      const float diff = step * static_cast<float>(NearestLevel(x[i], step, offset)) - offset - x[i];
      e += diff * diff;
    }
    return e;
  };
  best.step = (hi - lo) / 15.0f;
  best.offset = -lo;
  float best_error = error_of(best.step, best.offset);
  double sx = 0;
  for (int i = 0; i < n; ++i) sx += x[i];
  for (int t = -10; t <= 10; ++t) {
    const float step0 = (hi - lo) / (15.0f + 0.1f * static_cast<float>(t));
    double sq = 0, sqq = 0, sqx = 0;
    for (int i = 0; i < n; ++i) {
      const double q = NearestLevel(x[i], step0, -lo);
      sq += q;
      sqq += q * q;
      sqx += q * x[i];
    }
    const double det = n * sqq - sq * sq;
    if (det <= 0.0) continue;  // all levels equal
    double step = (n * sqx - sq * sx) / det;
    double base = (sqq * sx - sq * sqx) / det;  // the value of level 0, = -offset
    if (base > 0.0) {
      base = 0.0;
      step = sqx / sqq;
    }
    if (step <= 0.0) continue;
    const float e = error_of(static_cast<float>(step), static_cast<float>(-base));
    if (e < best_error) {
      best_error = e;
      best.step = static_cast<float>(step);
      best.offset = static_cast<float>(-base);
    }
  }
  return best;
}

}  // namespace

void QuantizeRowQ8_0(const float* x, int64_t cols, BlockQ8_0* out) {
  float buf[kQ8Block];
  const int64_t nb = CeilDiv(cols, kQ8Block);
  for (int64_t b = 0; b < nb; ++b) {
    const float* v = PaddedBlock(x, cols, b, kQ8Block, buf);
    float amax = 0.0f;
    for (int i = 0; i < kQ8Block; ++i) amax = std::max(amax, std::fabs(v[i]));
    BlockQ8_0& o = out[b];
    o.d = F16AtLeast(amax / 127.0f);
    const float d = F16ToF32(o.d);
    for (int i = 0; i < kQ8Block; ++i) {
      const float q = d > 0.0f ? RoundToInt(std::clamp(v[i] / d, -127.0f, 127.0f)) : 0.0f;
      o.qs[i] = static_cast<int8_t>(q);
    }
  }
}

void DequantizeRowQ8_0(const BlockQ8_0* in, int64_t cols, float* out) {
  for (int64_t i = 0; i < cols; ++i) {
    const BlockQ8_0& b = in[i / kQ8Block];
    out[i] = F16ToF32(b.d) * static_cast<float>(b.qs[i % kQ8Block]);
  }
}

namespace {

// The kQ8Groups walk both directions share: calls piece(b, s, at) for piece s (values 4s..4s+3) of
// every block b of a row of nb blocks, `at` being its byte in the grouped values (s * 4m + k * 4
// into its group of m blocks, block k of it), and scale(b, at) with the byte of block b's scale.
template <class Piece, class Scale>
void ForEachQ8GroupsPiece(int64_t nb, Piece piece, Scale scale) {
  for (int64_t g0 = 0; g0 < nb; g0 += kQ8Group) {
    const int64_t m = std::min<int64_t>(kQ8Group, nb - g0);
    for (int64_t k = 0; k < m; ++k) {
      for (int s = 0; s < kQ8Block / 4; ++s) piece(g0 + k, s, g0 * kQ8Block + s * 4 * m + k * 4);
      scale(g0 + k, nb * kQ8Block + 2 * (g0 + k));
    }
  }
}

// Four values with their sign bits flipped (q ^ 0x80 each way).
void CopyFlipped4(const void* from, void* to) {
  uint32_t v;
  std::memcpy(&v, from, 4);
  v ^= 0x80808080u;
  std::memcpy(to, &v, 4);
}

}  // namespace

void PackQ8GroupsRow(const BlockQ8_0* in, int64_t cols, uint8_t* out) {
  ForEachQ8GroupsPiece(
      CeilDiv(cols, kQ8Block), [&](int64_t b, int s, int64_t at) { CopyFlipped4(in[b].qs + 4 * s, out + at); },
      [&](int64_t b, int64_t at) { std::memcpy(out + at, &in[b].d, sizeof(in[b].d)); });
}

void UnpackQ8GroupsRow(const uint8_t* in, int64_t cols, BlockQ8_0* out) {
  ForEachQ8GroupsPiece(
      CeilDiv(cols, kQ8Block), [&](int64_t b, int s, int64_t at) { CopyFlipped4(in + at, out[b].qs + 4 * s); },
      [&](int64_t b, int64_t at) { std::memcpy(&out[b].d, in + at, sizeof(out[b].d)); });
}

void QuantizeRowQ4K(const float* x, int64_t cols, BlockQ4K* out) {
  float buf[kQ4KBlock];
  const int64_t nb = CeilDiv(cols, kQ4KBlock);
  for (int64_t b = 0; b < nb; ++b) {
    const float* v = PaddedBlock(x, cols, b, kQ4KBlock, buf);
    BlockQ4K& o = out[b];
    SubBlockFit fit[8];
    float max_step = 0.0f, max_offset = 0.0f;
    for (int j = 0; j < 8; ++j) {
      fit[j] = FitSubBlock(v + j * kQ4KSub);
      max_step = std::max(max_step, fit[j].step);
      max_offset = std::max(max_offset, fit[j].offset);
    }
    // The eight steps and offsets as 8-bit multiples of two f16 block scales, each to nearest.
    o.d = F32ToF16(max_step / 255.0f);
    o.dmin = F32ToF16(max_offset / 255.0f);
    const float d = F16ToF32(o.d), dmin = F16ToF32(o.dmin);
    uint8_t q[kQ4KBlock];
    for (int j = 0; j < 8; ++j) {
      o.scales[j] = static_cast<uint8_t>(RoundedSteps(fit[j].step, d));
      o.mins[j] = static_cast<uint8_t>(RoundedSteps(fit[j].offset, dmin));
      // The levels are re-rounded against the stored step and offset, so each weight gets the
      // level of its sub-block nearest to it.
      const float step = d * static_cast<float>(o.scales[j]), offset = dmin * static_cast<float>(o.mins[j]);
      for (int i = 0; i < kQ4KSub; ++i)
        q[Q4KPos(j, i)] = static_cast<uint8_t>(NearestLevel(v[j * kQ4KSub + i], step, offset));
    }
    for (int c = 0; c < 4; ++c)
      for (int i = 0; i < 32; ++i)
        o.qs[c * 32 + i] = static_cast<uint8_t>(q[c * 64 + i] | (q[c * 64 + 32 + i] << 4));
  }
}

void DequantizeRowQ4K(const BlockQ4K* in, int64_t cols, float* out) {
  for (int64_t b = 0; b * kQ4KBlock < cols; ++b) {
    const BlockQ4K& o = in[b];
    const float d = F16ToF32(o.d), dmin = F16ToF32(o.dmin);
    for (int k = 0; k < kQ4KBlock && b * kQ4KBlock + k < cols; ++k) {
      const int j = k / kQ4KSub, q = Q4KNibble(o, Q4KPos(j, k % kQ4KSub));
      out[b * kQ4KBlock + k] = d * static_cast<float>(o.scales[j]) * static_cast<float>(q) -
                               dmin * static_cast<float>(o.mins[j]);
    }
  }
}

void QuantizeRowA8(const float* x, int64_t cols, BlockA8* out) {
  float buf[kQ8Block];
  const int64_t nb = CeilDiv(cols, kQ8Block);
  for (int64_t b = 0; b < nb; ++b) {
    const float* v = PaddedBlock(x, cols, b, kQ8Block, buf);
    float amax = 0.0f;
    for (int i = 0; i < kQ8Block; ++i) amax = std::max(amax, std::fabs(v[i]));
    const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    out[b].d = amax / 127.0f;
    for (int i = 0; i < kQ8Block; ++i) out[b].qs[i] = static_cast<int8_t>(RoundToInt(v[i] * id));
  }
}

void QuantizeRowA8K(const float* x, int64_t cols, BlockA8K* out) {
  float buf[kQ4KBlock];
  const int64_t nb = CeilDiv(cols, kQ4KBlock);
  for (int64_t b = 0; b < nb; ++b) {
    const float* v = PaddedBlock(x, cols, b, kQ4KBlock, buf);
    float amax = 0.0f;
    for (int i = 0; i < kQ4KBlock; ++i) amax = std::max(amax, std::fabs(v[i]));
    const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    out[b].d = amax / 127.0f;
    for (int j = 0; j < 8; ++j) {
      int sum = 0;
      for (int i = 0; i < kQ4KSub; ++i) {
        const int8_t q = static_cast<int8_t>(RoundToInt(v[j * kQ4KSub + i] * id));
        out[b].qs[Q4KPos(j, i)] = q;
        sum += q;
      }
      out[b].bsums[j] = static_cast<int16_t>(sum);
    }
  }
}

}  // namespace phi4mm
