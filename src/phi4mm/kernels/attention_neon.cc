// NEON kernels for CausalAttention on aarch64 (compiled with -march=armv8-a, the baseline; reached
// through RowKernelsFor for the neon and neondot ISAs). The table starts from the scalar one and
// replaces the dot products and weighted sums, which dominate decode and prefill: decode scores
// (f32 and f16 rows: two 4-wide fmla accumulators per query head, half rows widened with fcvtl as
// they are loaded) and the weighted sum over cached rows; the flash tiles' Q·Kᵀ (4 query rows
// against one key, 8 accumulators) and P·V, and the f16 tile widening. The q8 rows, the conversion
// to half and the online softmax (std::exp) stay scalar.
#include <arm_neon.h>

#include "phi4mm/base/half.h"
#include "phi4mm/kernels/attention.h"

namespace phi4mm::attention_internal {

namespace {

inline float32x4_t Load4(const float* p) { return vld1q_f32(p); }
inline float32x4_t Load4(const uint16_t* p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }
inline float Load1(const float* p) { return *p; }
inline float Load1(const uint16_t* p) {
  return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(*p))), 0);
}

// Asks for the cache lines of one head's part of cached row t + kPrefetchRows (when there is one):
// a head's rows lie `stride` apart, and a batch of sequences keeps the KV cache out of the caches.
constexpr int64_t kPrefetchRows = 8;
template <typename E>
inline void PrefetchAhead(const E* rows, int64_t stride, int64_t t, int64_t len, int64_t hd) {
  if (t + kPrefetchRows >= len) return;
  const char* p = reinterpret_cast<const char*>(rows + (t + kPrefetchRows) * stride);
  for (int64_t off = 0; off < hd * static_cast<int64_t>(sizeof(E)); off += 64) __builtin_prefetch(p + off);
}

template <typename E>
void Scores(const float* q, int G, const E* k, int64_t stride, int64_t len, int64_t hd, float scale, float* s) {
  const int64_t hd8 = hd & ~int64_t{7};
  for (int64_t t = 0; t < len; ++t) {
    PrefetchAhead(k, stride, t, len, hd);
    const E* kr = k + t * stride;
    for (int g = 0; g < G; ++g) {
      const float* qg = q + g * hd;
      float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0;
      for (int64_t d = 0; d < hd8; d += 8) {
        a0 = vfmaq_f32(a0, vld1q_f32(qg + d), Load4(kr + d));
        a1 = vfmaq_f32(a1, vld1q_f32(qg + d + 4), Load4(kr + d + 4));
      }
      float sum = vaddvq_f32(vaddq_f32(a0, a1));
      for (int64_t d = hd8; d < hd; ++d) sum += qg[d] * Load1(kr + d);
      s[g * len + t] = sum * scale;
    }
  }
}

template <typename E>
void Accum(const float* p, int64_t ldp, int G, const E* v, int64_t stride, int64_t len, int64_t hd, float* out) {
  const int64_t hd4 = hd & ~int64_t{3};
  for (int64_t t = 0; t < len; ++t) {
    PrefetchAhead(v, stride, t, len, hd);
    const E* vr = v + t * stride;
    for (int g = 0; g < G; ++g) {
      const float w = p[g * ldp + t];
      float* o = out + g * hd;
      for (int64_t d = 0; d < hd4; d += 4) vst1q_f32(o + d, vfmaq_n_f32(vld1q_f32(o + d), Load4(vr + d), w));
      for (int64_t d = hd4; d < hd; ++d) o[d] += w * Load1(vr + d);
    }
  }
}

void ScoresF32(const float* q, int G, const float* k, int64_t stride, int64_t len, int64_t hd, float scale, float* s) {
  Scores(q, G, k, stride, len, hd, scale, s);
}
void ScoresF16(const float* q, int G, const uint16_t* k, int64_t stride, int64_t len, int64_t hd, float scale,
               float* s) {
  Scores(q, G, k, stride, len, hd, scale, s);
}
void AccumF32(const float* p, int64_t ldp, int G, const float* v, int64_t stride, int64_t len, int64_t hd, float* out) {
  Accum(p, ldp, G, v, stride, len, hd, out);
}
void AccumF16(const float* p, int64_t ldp, int G, const uint16_t* v, int64_t stride, int64_t len, int64_t hd,
              float* out) {
  Accum(p, ldp, G, v, stride, len, hd, out);
}

void WidenF16(const uint16_t* k, int64_t stride, int64_t n, int64_t hd, int64_t hdp, float* dst) {
  const int64_t hd4 = hd & ~int64_t{3};
  for (int64_t t = 0; t < n; ++t) {
    const uint16_t* kr = k + t * stride;
    float* d0 = dst + t * hdp;
    for (int64_t d = 0; d < hd4; d += 4) vst1q_f32(d0 + d, Load4(kr + d));
    for (int64_t d = hd4; d < hd; ++d) d0[d] = Load1(kr + d);
    for (int64_t d = hd; d < hdp; ++d) d0[d] = 0.0f;
  }
}

// rows is a multiple of 4 and hdp of 8 (attention.h).
void TileQk(const float* q, int64_t rows, const float* k, int64_t n, int64_t hdp, float* s, int64_t lds) {
  for (int64_t r = 0; r < rows; r += 4) {
    const float* q0 = q + r * hdp;
    for (int64_t t = 0; t < n; ++t) {
      const float* kt = k + t * hdp;
      float32x4_t a[4][2];
      for (auto& ar : a) ar[0] = ar[1] = vdupq_n_f32(0.0f);
      for (int64_t d = 0; d < hdp; d += 8) {
        const float32x4_t k0 = vld1q_f32(kt + d), k1 = vld1q_f32(kt + d + 4);
        for (int j = 0; j < 4; ++j) {
          a[j][0] = vfmaq_f32(a[j][0], vld1q_f32(q0 + j * hdp + d), k0);
          a[j][1] = vfmaq_f32(a[j][1], vld1q_f32(q0 + j * hdp + d + 4), k1);
        }
      }
      for (int j = 0; j < 4; ++j) s[(r + j) * lds + t] = vaddvq_f32(vaddq_f32(a[j][0], a[j][1]));
    }
  }
}

void TilePv(const float* p, int64_t ldp, int64_t rows, const float* v, int64_t n, int64_t hdp, float* o) {
  for (int64_t r = 0; r < rows; ++r) {
    float* orow = o + r * hdp;
    for (int64_t t = 0; t < n; ++t) {
      const float w = p[r * ldp + t];
      const float* vt = v + t * hdp;
      for (int64_t d = 0; d < hdp; d += 4) vst1q_f32(orow + d, vfmaq_n_f32(vld1q_f32(orow + d), vld1q_f32(vt + d), w));
    }
  }
}

RowKernels MakeNeon() {
  RowKernels k = ScalarRowKernels();
  k.scores_f32 = ScoresF32;
  k.scores_f16 = ScoresF16;
  k.accum_f32 = AccumF32;
  k.accum_f16 = AccumF16;
  k.widen_f16 = WidenF16;
  k.tile_qk = TileQk;
  k.tile_pv = TilePv;
  return k;
}

}  // namespace

const RowKernels& NeonRowKernels() {
  static const RowKernels k = MakeNeon();
  return k;
}

}  // namespace phi4mm::attention_internal
