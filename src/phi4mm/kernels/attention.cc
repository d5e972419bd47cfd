// Causal GQA attention driver, the KV-cache row formats and the scalar kernels (the reference the
// AVX2 ones are tested against). Two paths: flash-style tiles for prefill (work items are (block of
// query positions, kv group); each walks the cached keys in tiles of kKeyTile rows with an online
// softmax), and the row path for decode (work items are (query position, kv group, slice of the
// cached length); each computes its scores, a local max, the exponentials, their sum and the
// unnormalised weighted sum of V, and slices are merged with the usual max-rescaling). Query
// positions (or blocks) are visited from both ends at once so that the causal triangle splits
// evenly over the pool's contiguous chunks.
#include "phi4mm/kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>
#include <type_traits>
#include <vector>

#include "phi4mm/base/half.h"

namespace phi4mm {

const char* KvDTypeName(KvDType d) {
  switch (d) {
    case KvDType::kF16: return "f16";
    case KvDType::kQ8: return "q8";
    default: return "f32";
  }
}

std::optional<KvDType> ParseKvDType(std::string_view s) {
  if (s == "f32") return KvDType::kF32;
  if (s == "f16") return KvDType::kF16;
  if (s == "q8") return KvDType::kQ8;
  return std::nullopt;
}

size_t KvHeadBytes(KvDType d, int64_t head_dim) {
  const size_t n = static_cast<size_t>(head_dim);
  switch (d) {
    case KvDType::kF16: return 2 * n;
    case KvDType::kQ8: return n + sizeof(float);
    default: return 4 * n;
  }
}

size_t KvRowBytes(KvDType d, int64_t n_kv_heads, int64_t head_dim) {
  return static_cast<size_t>(n_kv_heads) * KvHeadBytes(d, head_dim);
}

void StoreKvRow(KvDType d, const float* x, int64_t n_kv_heads, int64_t head_dim, void* dst) {
  const int64_t n = n_kv_heads * head_dim;
  if (d == KvDType::kF32) {
    std::memcpy(dst, x, static_cast<size_t>(n) * sizeof(float));
  } else if (d == KvDType::kF16) {
    F32ToF16Row(x, n, static_cast<uint16_t*>(dst));
  } else {
    const size_t hb = KvHeadBytes(d, head_dim);
    for (int64_t h = 0; h < n_kv_heads; ++h) {
      int8_t* qv = reinterpret_cast<int8_t*>(static_cast<uint8_t*>(dst) + h * hb);
      const float* xh = x + h * head_dim;
      float amax = 0.0f;
      for (int64_t i = 0; i < head_dim; ++i) amax = std::max(amax, std::fabs(xh[i]));
      const float s = amax / 127.0f, inv = amax > 0.0f ? 127.0f / amax : 0.0f;
      for (int64_t i = 0; i < head_dim; ++i)
        qv[i] = static_cast<int8_t>(std::clamp(std::nearbyint(xh[i] * inv), -127.0f, 127.0f));
      std::memcpy(qv + head_dim, &s, sizeof(float));
    }
  }
}

namespace attention_internal {

namespace {

float Load(const float* p, int64_t i) { return p[i]; }
float Load(const uint16_t* p, int64_t i) { return F16ToF32(p[i]); }
float Load(const int8_t* p, int64_t i) { return static_cast<float>(p[i]); }

float RowScale(const uint8_t* sc, int64_t t, int64_t stride) {
  float s;
  std::memcpy(&s, sc + t * stride, sizeof(float));
  return s;
}

// Row t's factor: 1 for float rows, its stored scale for q8.
template <typename E>
float Factor(const uint8_t* sc, int64_t t, int64_t stride) {
  if constexpr (std::is_same_v<E, int8_t>) return RowScale(sc, t, stride);
  else return 1.0f;
}

template <typename E>
void ScoresScalar(const float* q, int G, const E* k, const uint8_t* sc, int64_t stride, int64_t len, int64_t hd,
                  float scale, float* s) {
  for (int64_t t = 0; t < len; ++t) {
    const E* kr = k + t * stride;
    const float f = scale * Factor<E>(sc, t, stride);
    for (int g = 0; g < G; ++g) {
      const float* qg = q + g * hd;
      float acc[8] = {};
      int64_t d = 0;
      for (; d + 8 <= hd; d += 8)
        for (int j = 0; j < 8; ++j) acc[j] += qg[d + j] * Load(kr, d + j);
      float sum = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
      for (; d < hd; ++d) sum += qg[d] * Load(kr, d);
      s[g * len + t] = sum * f;
    }
  }
}

template <typename E>
void AccumScalar(const float* p, int64_t ldp, int G, const E* v, const uint8_t* sc, int64_t stride, int64_t len,
                 int64_t hd, float* out) {
  for (int64_t t = 0; t < len; ++t) {
    const E* vr = v + t * stride;
    const float f = Factor<E>(sc, t, stride);
    for (int g = 0; g < G; ++g) {
      const float w = p[g * ldp + t] * f;
      float* o = out + g * hd;
      for (int64_t d = 0; d < hd; ++d) o[d] += w * Load(vr, d);
    }
  }
}

void ScoresF32(const float* q, int G, const float* k, int64_t stride, int64_t len, int64_t hd, float scale, float* s) {
  ScoresScalar(q, G, k, nullptr, stride, len, hd, scale, s);
}
void ScoresF16(const float* q, int G, const uint16_t* k, int64_t stride, int64_t len, int64_t hd, float scale,
               float* s) {
  ScoresScalar(q, G, k, nullptr, stride, len, hd, scale, s);
}
void AccumF32(const float* p, int64_t ldp, int G, const float* v, int64_t stride, int64_t len, int64_t hd, float* out) {
  AccumScalar(p, ldp, G, v, nullptr, stride, len, hd, out);
}
void AccumF16(const float* p, int64_t ldp, int G, const uint16_t* v, int64_t stride, int64_t len, int64_t hd,
              float* out) {
  AccumScalar(p, ldp, G, v, nullptr, stride, len, hd, out);
}

void ToF16Scalar(const float* x, int64_t n, uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = F32ToF16(x[i]);
}

template <typename E>
void WidenScalar(const E* k, const uint8_t* sc, int64_t stride, int64_t n, int64_t hd, int64_t hdp, float* dst) {
  for (int64_t t = 0; t < n; ++t) {
    const float f = Factor<E>(sc, t, stride);
    for (int64_t d = 0; d < hd; ++d) dst[t * hdp + d] = Load(k + t * stride, d) * f;
    for (int64_t d = hd; d < hdp; ++d) dst[t * hdp + d] = 0.0f;
  }
}
void WidenF32(const float* k, int64_t stride, int64_t n, int64_t hd, int64_t hdp, float* dst) {
  WidenScalar(k, nullptr, stride, n, hd, hdp, dst);
}
void WidenF16(const uint16_t* k, int64_t stride, int64_t n, int64_t hd, int64_t hdp, float* dst) {
  WidenScalar(k, nullptr, stride, n, hd, hdp, dst);
}

void TileQkScalar(const float* q, int64_t rows, const float* k, int64_t n, int64_t hdp, float* s, int64_t lds) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t t = 0; t < n; ++t) {
      float acc = 0.0f;
      for (int64_t d = 0; d < hdp; ++d) acc += q[r * hdp + d] * k[t * hdp + d];
      s[r * lds + t] = acc;
    }
}

void TileSoftmaxScalar(float* s, int64_t lds, int64_t rows, int64_t n, float* m, float* l, float* o, int64_t hdp) {
  for (int64_t r = 0; r < rows; ++r) {
    float* sr = s + r * lds;
    float mx = m[r];
    for (int64_t t = 0; t < n; ++t) mx = std::max(mx, sr[t]);
    if (mx == -INFINITY) {
      std::fill(sr, sr + n, 0.0f);
      continue;
    }
    const float alpha = std::exp(m[r] - mx);
    float sum = 0.0f;
    for (int64_t t = 0; t < n; ++t) sum += (sr[t] = std::exp(sr[t] - mx));
    m[r] = mx;
    l[r] = l[r] * alpha + sum;
    if (alpha != 1.0f)
      for (int64_t d = 0; d < hdp; ++d) o[r * hdp + d] *= alpha;
  }
}

void TilePvScalar(const float* p, int64_t ldp, int64_t rows, const float* v, int64_t n, int64_t hdp, float* o) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t t = 0; t < n; ++t) {
      const float w = p[r * ldp + t];
      for (int64_t d = 0; d < hdp; ++d) o[r * hdp + d] += w * v[t * hdp + d];
    }
}

// The scalar table's direct tiles widen the rows into a scratch tile and run TileQkScalar /
// TilePvScalar on it: the same sums by construction (written out per row, the compiler contracted
// the conversion and the dot product differently on aarch64), and the scalar table is the
// reference, not a fast path.
template <typename E>
void TileQkFromScalar(const float* q, int64_t rows, const E* k, const uint8_t* sc, int64_t stride, int64_t n,
                      int64_t hdp, float* s, int64_t lds) {
  thread_local std::vector<float> tile;
  tile.resize(static_cast<size_t>(n * hdp));
  WidenScalar(k, sc, stride, n, hdp, hdp, tile.data());
  TileQkScalar(q, rows, tile.data(), n, hdp, s, lds);
}
template <typename E>
void TilePvFromScalar(const float* p, int64_t ldp, int64_t rows, const E* v, const uint8_t* sc, int64_t stride,
                      int64_t n, int64_t hdp, float* o) {
  thread_local std::vector<float> tile;
  tile.resize(static_cast<size_t>(n * hdp));
  WidenScalar(v, sc, stride, n, hdp, hdp, tile.data());
  TilePvScalar(p, ldp, rows, tile.data(), n, hdp, o);
}
void TileQkF32Scalar(const float* q, int64_t rows, const float* k, int64_t stride, int64_t n, int64_t hdp, float* s,
                     int64_t lds) {
  TileQkFromScalar(q, rows, k, nullptr, stride, n, hdp, s, lds);
}
void TileQkF16Scalar(const float* q, int64_t rows, const uint16_t* k, int64_t stride, int64_t n, int64_t hdp,
                     float* s, int64_t lds) {
  TileQkFromScalar(q, rows, k, nullptr, stride, n, hdp, s, lds);
}
void TilePvF32Scalar(const float* p, int64_t ldp, int64_t rows, const float* v, int64_t stride, int64_t n,
                     int64_t hdp, float* o) {
  TilePvFromScalar(p, ldp, rows, v, nullptr, stride, n, hdp, o);
}
void TilePvF16Scalar(const float* p, int64_t ldp, int64_t rows, const uint16_t* v, int64_t stride, int64_t n,
                     int64_t hdp, float* o) {
  TilePvFromScalar(p, ldp, rows, v, nullptr, stride, n, hdp, o);
}

// Query position (or block) visited k-th of S: 0, S-1, 1, S-2, ... (balances the causal triangle).
int64_t ZigZag(int64_t k, int64_t S) { return (k & 1) ? S - 1 - k / 2 : k / 2; }

// Where head g's part of cached position t lies (KvView's strides), and the kernels for the
// cache's element type.
struct Source {
  const RowKernels& rk;
  const uint8_t* base;
  KvDType dtype;
  int64_t hd, pos_stride, head_stride;

  const void* at(int64_t t, int64_t g) const { return base + t * pos_stride + g * head_stride; }
  // A q8 row's scale follows its head_dim values.
  const uint8_t* scale_ptr(int64_t t, int64_t g) const { return static_cast<const uint8_t*>(at(t, g)) + hd; }
  // Position stride in elements of the cache's type.
  int64_t stride() const {
    return dtype == KvDType::kF32 ? pos_stride / 4 : dtype == KvDType::kF16 ? pos_stride / 2 : pos_stride;
  }

  void Scores(const float* q, int G, int64_t t0, int64_t g, int64_t n, float scale, float* s) const {
    if (dtype == KvDType::kF32)
      rk.scores_f32(q, G, static_cast<const float*>(at(t0, g)), stride(), n, hd, scale, s);
    else if (dtype == KvDType::kF16)
      rk.scores_f16(q, G, static_cast<const uint16_t*>(at(t0, g)), stride(), n, hd, scale, s);
    else
      rk.scores_q8(q, G, static_cast<const int8_t*>(at(t0, g)), scale_ptr(t0, g), stride(), n, hd, scale, s);
  }
  void Accum(const float* p, int64_t ldp, int G, int64_t t0, int64_t g, int64_t n, float* o) const {
    if (dtype == KvDType::kF32)
      rk.accum_f32(p, ldp, G, static_cast<const float*>(at(t0, g)), stride(), n, hd, o);
    else if (dtype == KvDType::kF16)
      rk.accum_f16(p, ldp, G, static_cast<const uint16_t*>(at(t0, g)), stride(), n, hd, o);
    else
      rk.accum_q8(p, ldp, G, static_cast<const int8_t*>(at(t0, g)), scale_ptr(t0, g), stride(), n, hd, o);
  }
  // The rows' tile_qk / tile_pv on the cache itself (hd == hdp).
  void QkFrom(const float* q, int64_t rows, int64_t t0, int64_t g, int64_t n, int64_t hdp, float* s, int64_t lds) const {
    if (dtype == KvDType::kF32)
      rk.tile_qk_f32(q, rows, static_cast<const float*>(at(t0, g)), stride(), n, hdp, s, lds);
    else if (dtype == KvDType::kF16)
      rk.tile_qk_f16(q, rows, static_cast<const uint16_t*>(at(t0, g)), stride(), n, hdp, s, lds);
    else
      rk.tile_qk_q8(q, rows, static_cast<const int8_t*>(at(t0, g)), scale_ptr(t0, g), stride(), n, hdp, s, lds);
  }
  void PvFrom(const float* p, int64_t ldp, int64_t rows, int64_t t0, int64_t g, int64_t n, int64_t hdp, float* o) const {
    if (dtype == KvDType::kF32)
      rk.tile_pv_f32(p, ldp, rows, static_cast<const float*>(at(t0, g)), stride(), n, hdp, o);
    else if (dtype == KvDType::kF16)
      rk.tile_pv_f16(p, ldp, rows, static_cast<const uint16_t*>(at(t0, g)), stride(), n, hdp, o);
    else
      rk.tile_pv_q8(p, ldp, rows, static_cast<const int8_t*>(at(t0, g)), scale_ptr(t0, g), stride(), n, hdp, o);
  }
  void Widen(int64_t t0, int64_t g, int64_t n, int64_t hdp, float* dst) const {
    if (dtype == KvDType::kF32)
      rk.widen_f32(static_cast<const float*>(at(t0, g)), stride(), n, hd, hdp, dst);
    else if (dtype == KvDType::kF16)
      rk.widen_f16(static_cast<const uint16_t*>(at(t0, g)), stride(), n, hd, hdp, dst);
    else
      rk.widen_q8(static_cast<const int8_t*>(at(t0, g)), scale_ptr(t0, g), stride(), n, hd, hdp, dst);
  }
};

constexpr int64_t kFlashRows = 96;   // query rows (positions x heads of a group) per flash block
constexpr int64_t kKeyTile = 64;     // cached rows per tile
constexpr int64_t kSliceKeys = 256;  // cached rows per slice (a multiple of kKeyTile)

// The one algorithm every query row goes through, whichever path computes it, so that a row's
// output is a function of its query and its cached rows alone, bit for bit: not of the other
// rows of its flash block, the other sequences of the step, the step's size or the thread count
// (tests/batch_invariance_test.cc). The cached rows 0..len-1 are cut into slices at fixed absolute
// positions (kSliceKeys) and each slice into tiles (kKeyTile). Per slice, from a fresh state
// (m = -inf, l = 0, o = 0): per tile, widen K, s = (q * scale) . k (tile_qk), keys at or past the
// row's length set to -inf, online softmax (tile_softmax, whose masked entries become exact zeros
// and add nothing), widen V, o += p V (tile_pv). Slices are then folded left to right (Fold) and
// the result divided by the sum. Decode splits a row's slices over threads; prefill walks them in
// order; both fold the same partial states in the same order.

// Folds a slice's partial state (m, l, o[hd]) into a row's running one (M, L, O[hd]). One
// out-of-line body, so both paths round it the same way.
[[gnu::noinline]] void Fold(float m, float l, const float* o, int64_t hd, float* M, float* L, float* O) {
  if (l == 0.0f) return;
  if (*L == 0.0f) {
    *M = m;
    *L = l;
    std::copy(o, o + hd, O);
    return;
  }
  const float mx = std::max(*M, m);
  const float a = std::exp(*M - mx), b = std::exp(m - mx);
  *M = mx;
  *L = *L * a + l * b;
  for (int64_t d = 0; d < hd; ++d) O[d] = O[d] * a + o[d] * b;
}

// Buffers of one slice computation: `rows` query rows (a multiple of 4) of hdp floats.
struct SliceScratch {
  std::vector<float> kt, vt, sc, m, l, o;
  void Size(int64_t rows, int64_t hdp) {
    kt.resize(kKeyTile * hdp);
    vt.resize(kKeyTile * hdp);
    sc.resize(rows * kKeyTile);
    m.resize(rows);
    l.resize(rows);
    o.resize(rows * hdp);
  }
};

// One slice [t_begin, t_end) of kv group `grp` for query rows qp[rows][hdp] (already scaled),
// row r seeing the cached rows below lens[r]; leaves each row's m, l and o (hdp apart) in `w`.
// `direct` (head_dim == hdp): the tiles read the cache itself instead of a widened copy, with the
// same sums (decode, whose few rows would not pay for the copy).
void RunSlice(const Source& K, const Source& V, int64_t grp, const float* qp, int64_t rows, const int64_t* lens,
              int64_t t_begin, int64_t t_end, int64_t hdp, bool direct, SliceScratch* w) {
  const RowKernels& rk = K.rk;
  std::fill(w->m.begin(), w->m.begin() + rows, -INFINITY);
  std::fill(w->l.begin(), w->l.begin() + rows, 0.0f);
  std::fill(w->o.begin(), w->o.begin() + rows * hdp, 0.0f);
  for (int64_t t0 = t_begin; t0 < t_end; t0 += kKeyTile) {
    const int64_t n = std::min(kKeyTile, t_end - t0);
    if (direct) {
      K.QkFrom(qp, rows, t0, grp, n, hdp, w->sc.data(), kKeyTile);
    } else {
      K.Widen(t0, grp, n, hdp, w->kt.data());
      rk.tile_qk(qp, rows, w->kt.data(), n, hdp, w->sc.data(), kKeyTile);
    }
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t t = std::max<int64_t>(0, lens[r] - t0); t < n; ++t) w->sc[r * kKeyTile + t] = -INFINITY;
    rk.tile_softmax(w->sc.data(), kKeyTile, rows, n, w->m.data(), w->l.data(), w->o.data(), hdp);
    if (direct) {
      V.PvFrom(w->sc.data(), kKeyTile, rows, t0, grp, n, hdp, w->o.data());
    } else {
      V.Widen(t0, grp, n, hdp, w->vt.data());
      rk.tile_pv(w->sc.data(), kKeyTile, rows, w->vt.data(), n, hdp, w->o.data());
    }
  }
}

// Query row r (position s0 + r / G, head grp * G + r % G) scaled into qp[r][hdp], zero-padded.
void PackQueries(const float* q, int64_t s0, int64_t nr, int64_t rows, int64_t G, int64_t grp, const AttentionShape& sh,
                 int64_t hdp, float* qp) {
  std::fill(qp, qp + rows * hdp, 0.0f);
  for (int64_t r = 0; r < nr; ++r) {
    const float* src = q + ((s0 + r / G) * sh.n_heads + grp * G + r % G) * sh.head_dim;
    for (int64_t d = 0; d < sh.head_dim; ++d) qp[r * hdp + d] = src[d] * sh.scale;
  }
}

// Prefill: work items are (block of query positions, kv group); each walks its slices in order,
// folding each into the rows' running states.
void RunFlash(const Source& K, const Source& V, const float* q, int64_t past, int64_t S, const AttentionShape& sh,
              float* out, ThreadPool* pool) {
  const int64_t G = sh.n_heads / sh.n_kv_heads, hd = sh.head_dim, nkv = sh.n_kv_heads, nh = sh.n_heads;
  const int64_t hdp = (hd + 7) / 8 * 8;
  const int64_t bq = std::max<int64_t>(1, kFlashRows / G);
  const int64_t nqb = (S + bq - 1) / bq;
  const int64_t max_rows = (bq * G + 3) / 4 * 4;
  auto body = [&](int64_t b, int64_t e) {
    SliceScratch w;
    w.Size(max_rows, hdp);
    std::vector<float> qp(max_rows * hdp), M(max_rows), L(max_rows), O(max_rows * hd);
    std::vector<int64_t> lens(max_rows);
    for (int64_t idx = b; idx < e; ++idx) {
      const int64_t qb = ZigZag(idx / nkv, nqb), grp = idx % nkv;
      const int64_t s0 = qb * bq, s1 = std::min(S, s0 + bq), nr = (s1 - s0) * G, rows = (nr + 3) / 4 * 4;
      PackQueries(q, s0, nr, rows, G, grp, sh, hdp, qp.data());
      // Padding rows see every key of the block (their results are dropped).
      for (int64_t r = 0; r < rows; ++r) lens[r] = past + (r < nr ? s0 + r / G : s1 - 1) + 1;
      std::fill(M.begin(), M.begin() + rows, -INFINITY);
      std::fill(L.begin(), L.begin() + rows, 0.0f);
      const int64_t kend = past + s1;
      for (int64_t c0 = 0; c0 < kend; c0 += kSliceKeys) {
        RunSlice(K, V, grp, qp.data(), rows, lens.data(), c0, std::min(kend, c0 + kSliceKeys), hdp, false, &w);
        for (int64_t r = 0; r < nr; ++r) Fold(w.m[r], w.l[r], w.o.data() + r * hdp, hd, &M[r], &L[r], O.data() + r * hd);
      }
      for (int64_t r = 0; r < nr; ++r) {
        float* dst = out + ((s0 + r / G) * nh + grp * G + r % G) * hd;
        const float inv = 1.0f / L[r];
        for (int64_t d = 0; d < hd; ++d) dst[d] = O[r * hd + d] * inv;
      }
    }
  };
  const int64_t items = nqb * nkv;
  if (pool) pool->ParallelFor(items, body, 1);
  else body(0, items);
}

// One sequence's part of a row-path call: its queries, cache and output (RunRows).
struct RowJob {
  Source K, V;
  const float* q;
  int64_t past, S;
  float* out;
};

// Decode (few query rows) over several sequences in one ParallelFor: items are (sequence, query
// position, kv group, slice), so a long cache spreads over the threads; a row with several
// slices keeps their partial states, folded in order afterwards (a second ParallelFor over
// (sequence, position, group)); a row with one slice is written at once.
void RunRows(std::span<const RowJob> jobs, const AttentionShape& sh, ThreadPool* pool) {
  const int64_t G = sh.n_heads / sh.n_kv_heads, hd = sh.head_dim, nkv = sh.n_kv_heads;
  const int64_t hdp = (hd + 7) / 8 * 8, rows = (G + 3) / 4 * 4;
  const size_t nj = jobs.size();
  // Per sequence: slices per (position, group) (those of its longest row), its first item, its
  // first (position, group) pair, and where its partial states start (split sequences only).
  std::vector<int64_t> nsl(nj), first(nj + 1, 0), pair0(nj + 1, 0), part0(nj + 1, 0);
  for (size_t j = 0; j < nj; ++j) {
    nsl[j] = (jobs[j].past + jobs[j].S + kSliceKeys - 1) / kSliceKeys;
    const int64_t pairs = jobs[j].S * nkv;
    first[j + 1] = first[j] + pairs * nsl[j];
    pair0[j + 1] = pair0[j] + pairs;
    part0[j + 1] = part0[j] + (nsl[j] > 1 ? pairs * nsl[j] : 0);
  }
  // Partial states: per item, G maxima, G sums and G*hd unnormalised outputs.
  std::vector<float> part_m(static_cast<size_t>(part0[nj] * G)), part_l(static_cast<size_t>(part0[nj] * G), 0.0f);
  std::vector<float> part_o(static_cast<size_t>(part0[nj] * G * hd));
  auto body = [&](int64_t b, int64_t e) {
    SliceScratch w;
    w.Size(rows, hdp);
    std::vector<float> qp(rows * hdp);
    std::vector<int64_t> lens(rows);
    size_t j = 0;
    for (int64_t idx = b; idx < e; ++idx) {
      while (idx >= first[j + 1]) ++j;
      const RowJob& jb = jobs[j];
      const int64_t ns = nsl[j], local = idx - first[j];
      const int64_t c = local % ns, pair = local / ns;
      const int64_t s = ZigZag(pair / nkv, jb.S), g = pair % nkv;
      const int64_t len = jb.past + s + 1, t0 = c * kSliceKeys, t1 = std::min(len, t0 + kSliceKeys);
      const int64_t pi = part0[j] + local;  // this item's partial state when the sequence is split
      if (t0 >= t1) {
        if (ns > 1) std::fill(part_l.data() + pi * G, part_l.data() + (pi + 1) * G, 0.0f);
        continue;
      }
      PackQueries(jb.q, s, G, rows, G, g, sh, hdp, qp.data());
      std::fill(lens.begin(), lens.end(), len);
      RunSlice(jb.K, jb.V, g, qp.data(), rows, lens.data(), t0, t1, hdp, hd == hdp, &w);
      for (int64_t h = 0; h < G; ++h) {
        if (ns > 1) {
          part_m[pi * G + h] = w.m[h];
          part_l[pi * G + h] = w.l[h];
          std::copy(w.o.data() + h * hdp, w.o.data() + h * hdp + hd, part_o.data() + (pi * G + h) * hd);
        } else {
          float* dst = jb.out + (s * sh.n_heads + g * G + h) * hd;
          const float inv = 1.0f / w.l[h];
          for (int64_t d = 0; d < hd; ++d) dst[d] = w.o[h * hdp + d] * inv;
        }
      }
    }
  };
  if (pool) pool->ParallelFor(first[nj], body, 1);
  else body(0, first[nj]);
  if (part0[nj] == 0) return;
  auto merge = [&](int64_t b, int64_t e) {
    std::vector<float> O(static_cast<size_t>(hd));
    size_t j = 0;
    for (int64_t idx = b; idx < e; ++idx) {
      while (idx >= pair0[j + 1]) ++j;
      if (nsl[j] == 1) continue;
      const RowJob& jb = jobs[j];
      const int64_t pair = idx - pair0[j], s = ZigZag(pair / nkv, jb.S), g = pair % nkv;
      for (int64_t h = 0; h < G; ++h) {
        float M = -INFINITY, L = 0.0f;
        for (int64_t c = 0; c < nsl[j]; ++c) {
          const int64_t it = part0[j] + pair * nsl[j] + c;
          Fold(part_m[it * G + h], part_l[it * G + h], part_o.data() + (it * G + h) * hd, hd, &M, &L, O.data());
        }
        float* dst = jb.out + (s * sh.n_heads + g * G + h) * hd;
        const float inv = 1.0f / L;
        for (int64_t d = 0; d < hd; ++d) dst[d] = O[d] * inv;
      }
    }
  };
  if (pool) pool->ParallelFor(pair0[nj], merge, 1);
  else merge(0, pair0[nj]);
}

}  // namespace

const RowKernels& ScalarRowKernels() {
  static const RowKernels k{ScoresF32,
                            ScoresF16,
                            ScoresScalar<int8_t>,
                            AccumF32,
                            AccumF16,
                            AccumScalar<int8_t>,
                            ToF16Scalar,
                            WidenF32,
                            WidenF16,
                            WidenScalar<int8_t>,
                            TileQkScalar,
                            TileSoftmaxScalar,
                            TilePvScalar,
                            TileQkF32Scalar,
                            TileQkF16Scalar,
                            TileQkFromScalar<int8_t>,
                            TilePvF32Scalar,
                            TilePvF16Scalar,
                            TilePvFromScalar<int8_t>};
  return k;
}

const RowKernels& RowKernelsFor(Isa isa) {
  switch (FloatKernelIsa(isa)) {
#if defined(PHI4MM_BUILD_X86_KERNELS)
    case Isa::kAvx2: return Avx2RowKernels();
#endif
#if defined(PHI4MM_BUILD_ARM_KERNELS)
    case Isa::kNeon: return NeonRowKernels();
#endif
    default: return ScalarRowKernels();
  }
}

const RowKernels& ActiveRowKernels() {
  static const RowKernels* const active = &RowKernelsFor(ActiveIsa());
  return *active;
}

void CausalAttentionWith(const RowKernels& rk, Path path, std::span<const AttentionJob> jobs, const AttentionShape& sh,
                         ThreadPool* pool) {
  const int64_t G = sh.n_heads / sh.n_kv_heads;
  std::vector<RowJob> rows;
  for (const AttentionJob& jb : jobs) {
    const int64_t ps = jb.kv.pos_stride > 0 ? jb.kv.pos_stride
                                            : static_cast<int64_t>(KvRowBytes(jb.kv.dtype, sh.n_kv_heads, sh.head_dim));
    const int64_t hs = jb.kv.head_stride > 0 ? jb.kv.head_stride
                                             : static_cast<int64_t>(KvHeadBytes(jb.kv.dtype, sh.head_dim));
    const Source K{rk, static_cast<const uint8_t*>(jb.kv.k), jb.kv.dtype, sh.head_dim, ps, hs};
    const Source V{rk, static_cast<const uint8_t*>(jb.kv.v), jb.kv.dtype, sh.head_dim, ps, hs};
    // Few query rows (decode): the row path, which can split the cached length over threads;
    // the row-path sequences of a batch share one dispatch.
    const Path p = path != Path::kAuto ? path : jb.S * G >= 8 ? Path::kFlash : Path::kRows;
    if (p == Path::kFlash) RunFlash(K, V, jb.q, jb.past, jb.S, sh, jb.out, pool);
    else rows.push_back(RowJob{K, V, jb.q, jb.past, jb.S, jb.out});
  }
  if (!rows.empty()) RunRows(rows, sh, pool);
}

void CausalAttentionWith(const RowKernels& rk, Path path, const float* q, const KvView& kv, int64_t past, int64_t S,
                         const AttentionShape& sh, float* out, ThreadPool* pool) {
  const AttentionJob job{q, kv, past, S, out};
  CausalAttentionWith(rk, path, std::span<const AttentionJob>(&job, 1), sh, pool);
}

}  // namespace attention_internal

void F32ToF16Row(const float* x, int64_t n, uint16_t* out) { attention_internal::ActiveRowKernels().to_f16(x, n, out); }

void CausalAttention(const float* q, const KvView& kv, int64_t past, int64_t S, const AttentionShape& sh,
                     float* out, ThreadPool* pool) {
  attention_internal::CausalAttentionWith(attention_internal::ActiveRowKernels(), attention_internal::Path::kAuto, q,
                                          kv, past, S, sh, out, pool);
}

void CausalAttention(std::span<const AttentionJob> jobs, const AttentionShape& shape, ThreadPool* pool) {
  attention_internal::CausalAttentionWith(attention_internal::ActiveRowKernels(), attention_internal::Path::kAuto, jobs,
                                          shape, pool);
}

void CausalAttention(const float* q, const float* k, const float* v, int64_t past, int64_t S,
                     const AttentionShape& shape, float* out, ThreadPool* pool) {
  CausalAttention(q, KvView{k, v, KvDType::kF32}, past, S, shape, out, pool);
}

}  // namespace phi4mm
