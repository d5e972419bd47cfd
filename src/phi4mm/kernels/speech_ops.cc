// Conformer-style float32 operators (see speech_ops.h): portable scalar versions, except the
// swish and gated swish, which run the rows of activations.h, and the attention, which runs on the
// decoder's attention row kernels (attention.h), both of the process's ISA; the attention's threads
// split (head, query group) pairs.
#include "phi4mm/kernels/speech_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "phi4mm/kernels/activations.h"
#include "phi4mm/kernels/attention.h"

namespace phi4mm {

void SwishInPlace(float* x, int64_t n, ThreadPool* pool) {
  static const activation_internal::SwishFn swish = activation_internal::ActivationKernelsFor(ActiveIsa()).swish;
  // Pieces of 1024 floats: whole vectors of every table, so a value's result does not depend on
  // where the split falls (the scalar tail of a piece would round differently).
  constexpr int64_t kPiece = 1024;
  auto body = [&](int64_t p0, int64_t p1) {
    const int64_t i0 = p0 * kPiece, i1 = std::min(n, p1 * kPiece);
    swish(x + i0, i1 - i0);
  };
  const int64_t pieces = (n + kPiece - 1) / kPiece;
  if (pool != nullptr) pool->ParallelFor(pieces, body, 16);
  else body(0, pieces);
}

void ReluInPlace(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = std::max(x[i], 0.0f);
}

void GatedSwish(const float* x, int64_t n, int64_t d, const float* value_bias, const float* gate_bias, float* out,
                ThreadPool* pool) {
  static const activation_internal::GatedSwishRowFn row =
      activation_internal::ActivationKernelsFor(ActiveIsa()).gated_swish_row;
  auto body = [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) row(x + i * 2 * d, x + i * 2 * d + d, value_bias, gate_bias, d, out + i * d);
  };
  if (pool != nullptr) pool->ParallelFor(n, body, 16);
  else body(0, n);
}

// A work item is one head and a group of up to kQueries consecutive queries, which share every
// key and value row: the scores and the weighted sum run on the decoder's attention row kernels of
// the process's ISA (attention.h: the group's queries take the place of a KV group's query heads,
// the rows of one head lie H*D floats apart), the softmax on its tile softmax; the bias and the mask
// are added per query in between. Scalar per-query dot products here took ~28% of the speech
// encoder's time on a 30 s clip.
void RelBiasSelfAttention(const float* q, const float* k, const float* v, const float* rel_bias,
                          const uint8_t* allowed, const RelBiasAttentionShape& shape, float* out, ThreadPool* pool) {
  constexpr int64_t kQueries = 3;
  const attention_internal::RowKernels& rk = attention_internal::ActiveRowKernels();
  const int64_t L = shape.seq, H = shape.n_heads, D = shape.head_dim, W = H * D;
  const int64_t groups = (L + kQueries - 1) / kQueries;
  auto work = [&](int64_t p0, int64_t p1) {
    std::vector<float> qg(static_cast<size_t>(kQueries * D)), og(qg.size()), s(static_cast<size_t>(kQueries * L));
    float m[kQueries], l[kQueries];
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t h = p / groups, i0 = (p % groups) * kQueries;
      const int G = static_cast<int>(std::min(kQueries, L - i0));
      for (int g = 0; g < G; ++g) std::copy_n(q + (i0 + g) * W + h * D, D, qg.data() + g * D);
      rk.scores_f32(qg.data(), G, k + h * D, W, L, D, shape.scale, s.data());
      for (int g = 0; g < G; ++g) {
        const int64_t i = i0 + g;
        float* sg = s.data() + g * L;
        if (rel_bias) {
          const float* bias = rel_bias + h * (2 * L - 1) + (L - 1 - i);  // bias[j] for key j
          for (int64_t j = 0; j < L; ++j) sg[j] += bias[j];
        }
        if (allowed) {
          const uint8_t* ok = allowed + i * L;
          for (int64_t j = 0; j < L; ++j)
            if (!ok[j]) sg[j] = -std::numeric_limits<float>::infinity();
        }
        m[g] = -std::numeric_limits<float>::infinity();
        l[g] = 0.0f;
      }
      // p = exp(s - max) per query (all zeros for a query with no allowed key, whose l stays 0).
      rk.tile_softmax(s.data(), L, G, L, m, l, nullptr, 0);
      std::fill(og.begin(), og.end(), 0.0f);
      rk.accum_f32(s.data(), L, G, v + h * D, W, L, D, og.data());
      for (int g = 0; g < G; ++g) {
        const float inv = l[g] > 0.0f ? 1.0f / l[g] : 0.0f;
        float* o = out + (i0 + g) * W + h * D;
        for (int64_t d = 0; d < D; ++d) o[d] = og[g * D + d] * inv;
      }
    }
  };
  if (pool) pool->ParallelFor(H * groups, work, 4);
  else work(0, H * groups);
}

}  // namespace phi4mm
