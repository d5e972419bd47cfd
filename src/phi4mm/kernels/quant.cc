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

// The smallest integer n in [0, 255] with n * unit >= need (255 when none is).
int CeilSteps(float need, float unit) {
  if (need <= 0.0f || unit <= 0.0f) return 0;
  int n = static_cast<int>(std::min(255.0f, std::ceil(need / unit)));
  while (n < 255 && static_cast<float>(n) * unit < need) ++n;
  return n;
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
      const float q = d > 0.0f ? std::nearbyint(v[i] / d) : 0.0f;
      o.qs[i] = static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f));
    }
  }
}

void DequantizeRowQ8_0(const BlockQ8_0* in, int64_t cols, float* out) {
  for (int64_t i = 0; i < cols; ++i) {
    const BlockQ8_0& b = in[i / kQ8Block];
    out[i] = F16ToF32(b.d) * static_cast<float>(b.qs[i % kQ8Block]);
  }
}

void QuantizeRowQ4K(const float* x, int64_t cols, BlockQ4K* out) {
  float buf[kQ4KBlock];
  const int64_t nb = CeilDiv(cols, kQ4KBlock);
  for (int64_t b = 0; b < nb; ++b) {
    const float* v = PaddedBlock(x, cols, b, kQ4KBlock, buf);
    BlockQ4K& o = out[b];
    float lo[8], hi[8];
    float max_min = 0.0f;
    for (int j = 0; j < 8; ++j) {
      lo[j] = 0.0f;
      hi[j] = v[j * kQ4KSub];
      for (int i = 0; i < kQ4KSub; ++i) {
        lo[j] = std::min(lo[j], v[j * kQ4KSub + i]);
        hi[j] = std::max(hi[j], v[j * kQ4KSub + i]);
      }
      max_min = std::max(max_min, -lo[j]);
    }
    // Offsets first (rounded up, so -offset <= every value), then steps that cover the rest.
    o.dmin = F16AtLeast(max_min / 255.0f);
    const float dmin = F16ToF32(o.dmin);
    float offset[8], need[8], max_need = 0.0f;
    for (int j = 0; j < 8; ++j) {
      o.mins[j] = static_cast<uint8_t>(CeilSteps(-lo[j], dmin));
      offset[j] = dmin * static_cast<float>(o.mins[j]);
      need[j] = std::max(0.0f, (hi[j] + offset[j]) / 15.0f);
      max_need = std::max(max_need, need[j]);
    }
    o.d = F16AtLeast(max_need / 255.0f);
    const float d = F16ToF32(o.d);
    uint8_t q[kQ4KBlock];
    for (int j = 0; j < 8; ++j) {
      int sc = CeilSteps(need[j], d);
      while (sc < 255 && 15.0f * d * static_cast<float>(sc) < hi[j] + offset[j]) ++sc;
      o.scales[j] = static_cast<uint8_t>(sc);
      const float step = d * static_cast<float>(sc);
      for (int i = 0; i < kQ4KSub; ++i) {
        const float t = step > 0.0f ? std::nearbyint((v[j * kQ4KSub + i] + offset[j]) / step) : 0.0f;
        q[Q4KPos(j, i)] = static_cast<uint8_t>(std::clamp(t, 0.0f, 15.0f));
      }
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
    for (int i = 0; i < kQ8Block; ++i) out[b].qs[i] = static_cast<int8_t>(std::nearbyint(v[i] * id));
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
        const int8_t q = static_cast<int8_t>(std::nearbyint(v[j * kQ4KSub + i] * id));
        out[b].qs[Q4KPos(j, i)] = q;
        sum += q;
      }
      out[b].bsums[j] = static_cast<int16_t>(sum);
    }
  }
}

}  // namespace phi4mm
