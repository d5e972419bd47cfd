// QuantizeNBits / DequantizeNBits: MatMulNBits' symmetric block format, rounded as ORT rounds it.
#include "phi4mm/export/matmul_nbits.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace phi4mm::exporter {

NBitsMatrix QuantizeNBits(const float* w, int64_t n, int64_t k, int bits, int block) {
  NBitsMatrix m;
  m.n = n;
  m.k = k;
  m.bits = bits;
  m.block = block;
  const int64_t kb = m.k_blocks(), blob = block * bits / 8;
  m.packed.assign(static_cast<size_t>(n * kb * blob), 0);
  m.scales.assign(static_cast<size_t>(n * kb), 0.0f);
  const float half = static_cast<float>(1 << (bits - 1));
  const float qmax = static_cast<float>((1 << bits) - 1);
  for (int64_t r = 0; r < n; ++r) {
    const float* row = w + r * k;
    for (int64_t b = 0; b < kb; ++b) {
      const int64_t k0 = b * block, k1 = std::min(k, k0 + block);
      float lo = std::numeric_limits<float>::max(), hi = -lo;
      for (int64_t i = k0; i < k1; ++i) {
        lo = std::min(lo, row[i]);
        hi = std::max(hi, row[i]);
      }
      const float peak = std::fabs(hi) > std::fabs(lo) ? hi : lo;
      const float scale = -peak / half;
      const float inv = scale != 0.0f ? 1.0f / scale : 0.0f;
      m.scales[static_cast<size_t>(r * kb + b)] = scale;
      uint8_t* out = m.packed.data() + (r * kb + b) * blob;
      for (int64_t i = k0; i < k1; ++i) {
        const auto q = static_cast<uint8_t>(std::clamp(std::roundf(row[i] * inv + half), 0.0f, qmax));
        const int64_t j = i - k0;
        if (bits == 8) out[j] = q;
        else out[j / 2] = static_cast<uint8_t>(out[j / 2] | ((q & 0xf) << (4 * (j % 2))));
      }
    }
  }
  return m;
}

float DequantizeNBits(const NBitsMatrix& m, int64_t row, int64_t col) {
  const int64_t kb = m.k_blocks(), blob = m.block * m.bits / 8, b = col / m.block, j = col % m.block;
  const uint8_t* blk = m.packed.data() + (row * kb + b) * blob;
  const int q = m.bits == 8 ? blk[j] : (blk[j / 2] >> (4 * (j % 2))) & 0xf;
  return static_cast<float>(q - (1 << (m.bits - 1))) * m.scales[static_cast<size_t>(row * kb + b)];
}

}  // namespace phi4mm::exporter
