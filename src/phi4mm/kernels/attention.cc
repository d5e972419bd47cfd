// Reference causal GQA attention: scores, exact softmax, weighted sum. Work is split over
// (query position, head) pairs.
#include "phi4mm/kernels/attention.h"

#include <algorithm>
#include <vector>

#include "phi4mm/kernels/ops.h"
#include "phi4mm/kernels/weight_matrix.h"

namespace phi4mm {

void CausalAttention(const float* q, const float* k, const float* v, int64_t past, int64_t S,
                     const AttentionShape& sh, float* out, ThreadPool* pool) {
  const int64_t group = sh.n_heads / sh.n_kv_heads;
  const int64_t hd = sh.head_dim;
  const int64_t kv_stride = sh.n_kv_heads * hd;
  auto body = [&](int64_t b, int64_t e) {
    std::vector<float> scores(static_cast<size_t>(past + S));
    for (int64_t idx = b; idx < e; ++idx) {
      const int64_t s = idx / sh.n_heads, h = idx % sh.n_heads, g = h / group;
      const float* qv = q + (s * sh.n_heads + h) * hd;
      const int64_t len = past + s + 1;
      for (int64_t t = 0; t < len; ++t) scores[t] = DotF32(qv, k + t * kv_stride + g * hd, hd) * sh.scale;
      SoftmaxInPlace(scores.data(), len);
      float* o = out + (s * sh.n_heads + h) * hd;
      std::fill(o, o + hd, 0.0f);
      for (int64_t t = 0; t < len; ++t) {
        const float p = scores[t];
        const float* vv = v + t * kv_stride + g * hd;
        for (int64_t d = 0; d < hd; ++d) o[d] += p * vv[d];
      }
    }
  };
  if (pool) pool->ParallelFor(S * sh.n_heads, body, 1);
  else body(0, S * sh.n_heads);
}

}  // namespace phi4mm
