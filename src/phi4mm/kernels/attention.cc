// Causal GQA attention driver and its scalar row kernels. Work items are (query position, kv
// group, slice of the cached length); each item computes its scores, a local max, the exponentials,
// their sum and the unnormalised weighted sum of V, and slices are merged with the usual
// max-rescaling. Query positions are visited from both ends at once so that the causal triangle
// splits evenly over the pool's contiguous chunks.
#include "phi4mm/kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "phi4mm/base/half.h"
#include "phi4mm/kernels/cpu_features.h"

namespace phi4mm {

const char* KvDTypeName(KvDType d) { return d == KvDType::kF16 ? "f16" : "f32"; }

std::optional<KvDType> ParseKvDType(std::string_view s) {
  if (s == "f32") return KvDType::kF32;
  if (s == "f16") return KvDType::kF16;
  return std::nullopt;
}

namespace attention_internal {

namespace {

template <typename E>
float Load(const E* p, int64_t i) {
  if constexpr (sizeof(E) == 2) return F16ToF32(p[i]);
  else return p[i];
}

template <typename E>
void ScoresScalar(const float* q, int G, const E* k, int64_t stride, int64_t len, int64_t hd, float scale,
                  float* s) {
  for (int64_t t = 0; t < len; ++t) {
    const E* kr = k + t * stride;
    for (int g = 0; g < G; ++g) {
      const float* qg = q + g * hd;
      float acc[8] = {};
      int64_t d = 0;
      for (; d + 8 <= hd; d += 8)
        for (int j = 0; j < 8; ++j) acc[j] += qg[d + j] * Load(kr, d + j);
      float sum = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
      for (; d < hd; ++d) sum += qg[d] * Load(kr, d);
      s[g * len + t] = sum * scale;
    }
  }
}

template <typename E>
void AccumScalar(const float* p, int64_t ldp, int G, const E* v, int64_t stride, int64_t len, int64_t hd,
                 float* out) {
  for (int64_t t = 0; t < len; ++t) {
    const E* vr = v + t * stride;
    for (int g = 0; g < G; ++g) {
      const float w = p[g * ldp + t];
      float* o = out + g * hd;
      for (int64_t d = 0; d < hd; ++d) o[d] += w * Load(vr, d);
    }
  }
}

void ToF16Scalar(const float* x, int64_t n, uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = F32ToF16(x[i]);
}

}  // namespace

const RowKernels& ScalarRowKernels() {
  static const RowKernels k{ScoresScalar<float>, ScoresScalar<uint16_t>, AccumScalar<float>, AccumScalar<uint16_t>,
                            ToF16Scalar};
  return k;
}

const RowKernels& ActiveRowKernels() {
  static const RowKernels* const active = [] {
    const CpuFeatures& f = GetCpuFeatures();
    return f.avx2 && f.fma && f.f16c ? &Avx2RowKernels() : &ScalarRowKernels();
  }();
  return *active;
}

}  // namespace attention_internal

void F32ToF16Row(const float* x, int64_t n, uint16_t* out) { attention_internal::ActiveRowKernels().to_f16(x, n, out); }

namespace {

// Query position visited k-th: 0, S-1, 1, S-2, ... (balances the causal triangle).
int64_t ZigZag(int64_t k, int64_t S) { return (k & 1) ? S - 1 - k / 2 : k / 2; }

template <typename E>
void Run(const float* q, const E* k, const E* v, int64_t past, int64_t S, const AttentionShape& sh, float* out,
         ThreadPool* pool) {
  const attention_internal::RowKernels& rk = attention_internal::ActiveRowKernels();
  const int G = static_cast<int>(sh.n_heads / sh.n_kv_heads);
  const int64_t hd = sh.head_dim, nkv = sh.n_kv_heads, stride = nkv * hd;
  const int threads = pool ? pool->num_threads() : 1;
  // Split the cached length when there are too few (position, group) items for the threads.
  constexpr int64_t kMinSlice = 128;
  int64_t nsplit = 1;
  const int64_t items0 = S * nkv, total_len = past + S;
  if (items0 < 4 * threads && total_len >= 2 * kMinSlice)
    nsplit = std::min<int64_t>((4 * threads + items0 - 1) / items0, total_len / kMinSlice);
  const int64_t items = items0 * nsplit;
  // Partial results when split: per item, G maxima, G sums and G*hd unnormalised outputs.
  std::vector<float> part_m, part_l, part_o;
  if (nsplit > 1) {
    part_m.assign(items * G, -INFINITY);
    part_l.assign(items * G, 0.0f);
    part_o.assign(items * G * hd, 0.0f);
  }
  auto body = [&](int64_t b, int64_t e) {
    std::vector<float> scores, m(G), l(G);
    for (int64_t idx = b; idx < e; ++idx) {
      const int64_t c = idx % nsplit, pair = idx / nsplit;
      const int64_t s = ZigZag(pair / nkv, S), g = pair % nkv;
      const int64_t len = past + s + 1;
      const int64_t per = (len + nsplit - 1) / nsplit;
      const int64_t t0 = std::min(len, c * per), t1 = std::min(len, t0 + per), n = t1 - t0;
      const float* qg = q + (s * sh.n_heads + g * G) * hd;
      float* o = nsplit > 1 ? part_o.data() + idx * G * hd : out + (s * sh.n_heads + g * G) * hd;
      std::fill(o, o + G * hd, 0.0f);
      if (n <= 0) continue;
      scores.resize(static_cast<size_t>(G * n));
      if constexpr (sizeof(E) == 2)
        rk.scores_f16(qg, G, k + t0 * stride + g * hd, stride, n, hd, sh.scale, scores.data());
      else
        rk.scores_f32(qg, G, k + t0 * stride + g * hd, stride, n, hd, sh.scale, scores.data());
      for (int h = 0; h < G; ++h) {
        float* sc = scores.data() + h * n;
        float mx = -INFINITY;
        for (int64_t t = 0; t < n; ++t) mx = std::max(mx, sc[t]);
        double sum = 0;
        for (int64_t t = 0; t < n; ++t) sum += (sc[t] = std::exp(sc[t] - mx));
        m[h] = mx;
        l[h] = static_cast<float>(sum);
      }
      if constexpr (sizeof(E) == 2)
        rk.accum_f16(scores.data(), n, G, v + t0 * stride + g * hd, stride, n, hd, o);
      else
        rk.accum_f32(scores.data(), n, G, v + t0 * stride + g * hd, stride, n, hd, o);
      if (nsplit > 1) {
        std::copy(m.begin(), m.end(), part_m.data() + idx * G);
        std::copy(l.begin(), l.end(), part_l.data() + idx * G);
      } else {
        for (int h = 0; h < G; ++h) {
          const float inv = 1.0f / l[h];
          for (int64_t d = 0; d < hd; ++d) o[h * hd + d] *= inv;
        }
      }
    }
  };
  if (pool) pool->ParallelFor(items, body, 1);
  else body(0, items);
  if (nsplit == 1) return;
  for (int64_t pair = 0; pair < items0; ++pair) {
    const int64_t s = ZigZag(pair / nkv, S), g = pair % nkv;
    for (int h = 0; h < G; ++h) {
      float M = -INFINITY;
      for (int64_t c = 0; c < nsplit; ++c) M = std::max(M, part_m[(pair * nsplit + c) * G + h]);
      float* o = out + (s * sh.n_heads + g * G + h) * hd;
      std::fill(o, o + hd, 0.0f);
      double L = 0;
      for (int64_t c = 0; c < nsplit; ++c) {
        const int64_t it = pair * nsplit + c;
        if (part_l[it * G + h] == 0.0f) continue;
        const float w = std::exp(part_m[it * G + h] - M);
        L += static_cast<double>(w) * part_l[it * G + h];
        const float* po = part_o.data() + (it * G + h) * hd;
        for (int64_t d = 0; d < hd; ++d) o[d] += w * po[d];
      }
      const float inv = static_cast<float>(1.0 / L);
      for (int64_t d = 0; d < hd; ++d) o[d] *= inv;
    }
  }
}

}  // namespace

void CausalAttention(const float* q, const KvView& kv, int64_t past, int64_t S, const AttentionShape& sh,
                     float* out, ThreadPool* pool) {
  if (kv.dtype == KvDType::kF16)
    Run(q, static_cast<const uint16_t*>(kv.k), static_cast<const uint16_t*>(kv.v), past, S, sh, out, pool);
  else
    Run(q, static_cast<const float*>(kv.k), static_cast<const float*>(kv.v), past, S, sh, out, pool);
}

void CausalAttention(const float* q, const float* k, const float* v, int64_t past, int64_t S,
                     const AttentionShape& shape, float* out, ThreadPool* pool) {
  CausalAttention(q, KvView{k, v, KvDType::kF32}, past, S, shape, out, pool);
}

}  // namespace phi4mm
