// Conformer-style float32 operators (see speech_ops.h): portable scalar versions; attention
// threads split the (head, query) pairs.
#include "phi4mm/kernels/speech_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "phi4mm/kernels/weight_matrix.h"

namespace phi4mm {

void SwishInPlace(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] / (1.0f + std::exp(-x[i]));
}

void ReluInPlace(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = std::max(x[i], 0.0f);
}

void GatedSwish(const float* x, int64_t n, int64_t d, const float* value_bias, const float* gate_bias, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float* value = x + i * 2 * d;
    const float* gate = value + d;
    float* y = out + i * d;
    for (int64_t j = 0; j < d; ++j) {
      const float g = gate[j] + (gate_bias ? gate_bias[j] : 0.0f);
      y[j] = (value[j] + (value_bias ? value_bias[j] : 0.0f)) * (g / (1.0f + std::exp(-g)));
    }
  }
}

void RelBiasSelfAttention(const float* q, const float* k, const float* v, const float* rel_bias,
                          const uint8_t* allowed, const RelBiasAttentionShape& shape, float* out, ThreadPool* pool) {
  const int64_t L = shape.seq, H = shape.n_heads, D = shape.head_dim, W = H * D;
  auto work = [&](int64_t p0, int64_t p1) {
    std::vector<float> s(static_cast<size_t>(L));
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t h = p / L, i = p % L;
      const float* qi = q + i * W + h * D;
      const float* bias = rel_bias ? rel_bias + h * (2 * L - 1) + (L - 1 - i) : nullptr;  // bias[j] for key j
      const uint8_t* ok = allowed ? allowed + i * L : nullptr;
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < L; ++j) {
        if (ok && !ok[j]) {
          s[j] = -std::numeric_limits<float>::infinity();
          continue;
        }
        s[j] = DotF32(qi, k + j * W + h * D, D) * shape.scale + (bias ? bias[j] : 0.0f);
        mx = std::max(mx, s[j]);
      }
      float* o = out + i * W + h * D;
      std::fill(o, o + D, 0.0f);
      if (mx == -std::numeric_limits<float>::infinity()) continue;
      float sum = 0;
      for (int64_t j = 0; j < L; ++j) {
        s[j] = (ok && !ok[j]) ? 0.0f : std::exp(s[j] - mx);
        sum += s[j];
      }
      const float inv = 1.0f / sum;
      for (int64_t j = 0; j < L; ++j) {
        if (s[j] == 0.0f) continue;
        const float pj = s[j] * inv;
        const float* vj = v + j * W + h * D;
        for (int64_t d = 0; d < D; ++d) o[d] += pj * vj[d];
      }
    }
  };
  if (pool) pool->ParallelFor(H * L, work, 8);
  else work(0, H * L);
}

}  // namespace phi4mm
