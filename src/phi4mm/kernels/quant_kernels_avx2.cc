// AVX2 + FMA + F16C kernel table (compiled with -mavx2 -mfma -mf16c; only reached through the
// dispatch in quant_kernels.cc when the CPU has those features).
//  - f32/bf16/f16 weights x f32 activations: register tiles of R weight rows x N activation rows;
//    each 8-wide weight vector is widened once (bf16: zero-extend + shift, f16: vcvtph2ps) and
//    reused for all N rows.
//  - Q8_0 x A8: sign trick (|w| as the unsigned maddubs operand), madd to int32, one convert and
//    FMA per 32-block with the product of the two scales.
//  - Q4_K x A8K: unsigned nibbles straight into maddubs, madd with the 8-bit sub-scale, int32
//    accumulation over the whole 256-block, then one convert + FMA per block, and the min term
//    (sub-mins x activation block sums) folded into the same float accumulator.
// Activation quantizers reproduce the scalar reference bit for bit (same max, same reciprocal,
// round-to-nearest-even conversion).
#include <immintrin.h>

#include "phi4mm/kernels/avx2_reduce.h"
#include "phi4mm/kernels/quant.h"
#include "phi4mm/kernels/quant_kernels.h"

namespace phi4mm {

namespace {

using avx2::HSum;

inline void Store(const TileArgs& t, int r, int i, float v) {
  float& y = t.y[i * t.ldy + r];
  y = t.accumulate ? y + v : v;
}

inline float HalfToFloat(uint16_t h) { return _cvtsh_ss(h); }

// GEMV streams each weight row once. A tile's R rows are contiguous, and so is the next tile
// (the driver walks rows in order), but rows of a few KB are too short for the hardware stream
// prefetcher to ramp up on each. So while block b of this tile is computed, the matching slice of
// a later tile's bytes is prefetched: `step` bytes per block, one or two tiles ahead. Prefetches
// past the end of the matrix are harmless (they never fault).
inline void PrefetchNextTile(const TileArgs& t, int R, int64_t b, int64_t step) {
  const int64_t tile_bytes = R * static_cast<int64_t>(t.w_stride);
  const int64_t ahead = 1 + 12288 / tile_bytes;  // at least ~12 KB ahead: 2 tiles of short rows
  const char* p = reinterpret_cast<const char*>(t.w) + ahead * tile_bytes + b * step;
  for (int64_t o = 0; o < step; o += 64) _mm_prefetch(p + o, _MM_HINT_T0);
}

struct F32Loader {
  static constexpr int kBytes = 4;
  static __m256 Load(const uint8_t* row, int64_t k) { return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + k); }
  static float At(const uint8_t* row, int64_t k) { return reinterpret_cast<const float*>(row)[k]; }
};
struct Bf16Loader {
  static constexpr int kBytes = 2;
  static __m256 Load(const uint8_t* row, int64_t k) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const uint16_t*>(row) + k));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static float At(const uint8_t* row, int64_t k) {
    const uint32_t bits = static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(row)[k]) << 16;
    float f;
    __builtin_memcpy(&f, &bits, 4);
    return f;
  }
};
struct F16Loader {
  static constexpr int kBytes = 2;
  static __m256 Load(const uint8_t* row, int64_t k) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const uint16_t*>(row) + k)));
  }
  static float At(const uint8_t* row, int64_t k) { return HalfToFloat(reinterpret_cast<const uint16_t*>(row)[k]); }
};

template <class L>
struct FloatImpl {
  // R*N accumulators + R widened weight vectors + one activation vector. GEMV (N == 1) prefetches
  // the next tile like the block formats: the LoRA B factors' rows are only 512-640 bytes long.
  // 3x4 (16 ymm) measured
  // fastest at the vision and decoder shapes: the four activation rows (4 x cols floats) do not
  // stay in L1, so loads per FMA matter more than the accumulator spill of the widest tile.
  template <int R, int N>
  static void Run(const TileArgs& t) {
    __m256 acc[R][N];
    for (int r = 0; r < R; ++r)
      for (int i = 0; i < N; ++i) acc[r][i] = _mm256_setzero_ps();
    const float* x[N];
    for (int i = 0; i < N; ++i) x[i] = reinterpret_cast<const float*>(t.a + i * t.a_stride);
    const int64_t k8 = t.cols & ~int64_t{7};
    for (int64_t k = 0; k < k8; k += 8) {
      if constexpr (N == 1) {
        if (k % 32 == 0) PrefetchNextTile(t, R, k / 32, R * 32 * L::kBytes);
      }
      __m256 w[R];
      for (int r = 0; r < R; ++r) w[r] = L::Load(t.w + r * t.w_stride, k);
      for (int i = 0; i < N; ++i) {
        const __m256 xv = _mm256_loadu_ps(x[i] + k);
        for (int r = 0; r < R; ++r) acc[r][i] = _mm256_fmadd_ps(w[r], xv, acc[r][i]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int i = 0; i < N; ++i) {
        float s = HSum(acc[r][i]);
        for (int64_t k = k8; k < t.cols; ++k) s += L::At(t.w + r * t.w_stride, k) * x[i][k];
        Store(t, r, i, s);
      }
  }
};

// Q8_0 x A8. Per block and weight row, |w| is computed once and reused for the N activation rows;
// live registers are the R*N accumulators, w, |w|, one activation vector and two temporaries.
struct Q8Impl {
  template <int R, int N>
  static void Run(const TileArgs& t) {
    __m256 acc[R][N];
    for (int r = 0; r < R; ++r)
      for (int i = 0; i < N; ++i) acc[r][i] = _mm256_setzero_ps();
    const BlockQ8_0* w[R];
    const BlockA8* a[N];
    for (int r = 0; r < R; ++r) w[r] = reinterpret_cast<const BlockQ8_0*>(t.w + r * t.w_stride);
    for (int i = 0; i < N; ++i) a[i] = reinterpret_cast<const BlockA8*>(t.a + i * t.a_stride);
    const __m256i ones = _mm256_set1_epi16(1);
    const int64_t nb = CeilDiv(t.cols, kQ8Block);
    for (int64_t b = 0; b < nb; ++b) {
      if constexpr (N == 1) {
        if (b % 2 == 0) PrefetchNextTile(t, R, b / 2, 2 * R * static_cast<int64_t>(sizeof(BlockQ8_0)));
      }
      for (int r = 0; r < R; ++r) {
        const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[r][b].qs));
        const __m256i wabs = _mm256_sign_epi8(wv, wv);
        const float dw = HalfToFloat(w[r][b].d);
        for (int i = 0; i < N; ++i) {
          const __m256i av = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[i][b].qs));
          const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(wabs, _mm256_sign_epi8(av, wv)), ones);
          acc[r][i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw * a[i][b].d), acc[r][i]);
        }
      }
    }
    for (int r = 0; r < R; ++r)
      for (int i = 0; i < N; ++i) Store(t, r, i, HSum(acc[r][i]));
  }
};

// Q4_K x A8K. Per 64-weight chunk and weight row, the nibbles are unpacked once and the two
// sub-scales broadcast from memory, then reused for the N activation rows; live registers are the
// R*N int32 block sums and float accumulators (R*N <= 4), the unpacked row (4) and temporaries.
struct Q4KImpl {
  template <int R, int N>
  static void Run(const TileArgs& t) {
    __m256 acc[R][N];
    for (int r = 0; r < R; ++r)
      for (int i = 0; i < N; ++i) acc[r][i] = _mm256_setzero_ps();
    const BlockQ4K* w[R];
    const BlockA8K* a[N];
    for (int r = 0; r < R; ++r) w[r] = reinterpret_cast<const BlockQ4K*>(t.w + r * t.w_stride);
    for (int i = 0; i < N; ++i) a[i] = reinterpret_cast<const BlockA8K*>(t.a + i * t.a_stride);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const int64_t nb = CeilDiv(t.cols, kQ4KBlock);
    for (int64_t b = 0; b < nb; ++b) {
      if constexpr (N == 1) PrefetchNextTile(t, R, b, R * static_cast<int64_t>(sizeof(BlockQ4K)));
      __m256i isum[R][N];
      for (int r = 0; r < R; ++r)
        for (int i = 0; i < N; ++i) isum[r][i] = _mm256_setzero_si256();
      for (int c = 0; c < 4; ++c) {
        for (int r = 0; r < R; ++r) {
          const BlockQ4K& wb = w[r][b];
          const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.qs + c * 32));
          const __m256i lo = _mm256_and_si256(bits, m4);
          const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
          const __m256i sl = _mm256_set1_epi16(wb.scales[2 * c]);
          const __m256i sh = _mm256_set1_epi16(wb.scales[2 * c + 1]);
          for (int i = 0; i < N; ++i) {
            const int8_t* aq = a[i][b].qs + c * 64;
            const __m256i pl = _mm256_madd_epi16(
                _mm256_maddubs_epi16(lo, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(aq))), sl);
            const __m256i ph = _mm256_madd_epi16(
                _mm256_maddubs_epi16(hi, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(aq + 32))), sh);
            isum[r][i] = _mm256_add_epi32(isum[r][i], _mm256_add_epi32(pl, ph));
          }
        }
      }
      // Block tail: acc += d*da * isum - (dmin * mins) . (da * bsums), the sub-mins widened to
      // float once per weight row and the block sums once per activation row.
      __m256 dw[R], mw[R];
      for (int r = 0; r < R; ++r) {
        dw[r] = _mm256_set1_ps(HalfToFloat(w[r][b].d));
        const __m256i mins = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w[r][b].mins)));
        mw[r] = _mm256_mul_ps(_mm256_cvtepi32_ps(mins), _mm256_set1_ps(HalfToFloat(w[r][b].dmin)));
      }
      for (int i = 0; i < N; ++i) {
        const __m256 da = _mm256_broadcast_ss(&a[i][b].d);
        const __m256i bs = _mm256_cvtepi16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a[i][b].bsums)));
        const __m256 bf = _mm256_mul_ps(_mm256_cvtepi32_ps(bs), da);
        for (int r = 0; r < R; ++r) {
          acc[r][i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r][i]), _mm256_mul_ps(dw[r], da), acc[r][i]);
          acc[r][i] = _mm256_fnmadd_ps(mw[r], bf, acc[r][i]);
        }
      }
    }
    for (int r = 0; r < R; ++r)
      for (int i = 0; i < N; ++i) Store(t, r, i, HSum(acc[r][i]));
  }
};

// Instantiates Impl::Run<R, N> for every nr, na in [1, kMaxTile].
template <class Impl>
void Tile(const TileArgs& t) {
  static_assert(kMaxTile == 4, "extend the switch with kMaxTile");
  switch ((t.nr - 1) * 4 + (t.na - 1)) {
    case 0: return Impl::template Run<1, 1>(t);
    case 1: return Impl::template Run<1, 2>(t);
    case 2: return Impl::template Run<1, 3>(t);
    case 3: return Impl::template Run<1, 4>(t);
    case 4: return Impl::template Run<2, 1>(t);
    case 5: return Impl::template Run<2, 2>(t);
    case 6: return Impl::template Run<2, 3>(t);
    case 7: return Impl::template Run<2, 4>(t);
    case 8: return Impl::template Run<3, 1>(t);
    case 9: return Impl::template Run<3, 2>(t);
    case 10: return Impl::template Run<3, 3>(t);
    case 11: return Impl::template Run<3, 4>(t);
    case 12: return Impl::template Run<4, 1>(t);
    case 13: return Impl::template Run<4, 2>(t);
    case 14: return Impl::template Run<4, 3>(t);
    default: return Impl::template Run<4, 4>(t);
  }
}

// max |x| over 32 floats starting at v.
inline float AbsMax32(const float* v) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_andnot_ps(sign, _mm256_loadu_ps(v));
  for (int k = 8; k < 32; k += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(v + k)));
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Rounds 32 floats times `id` to int8 at out; returns their sum.
inline int Quant32(const float* v, float id, int8_t* out) {
  const __m256 s = _mm256_set1_ps(id);
  __m256i q[4];
  for (int k = 0; k < 4; ++k) q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(v + 8 * k), s));
  const __m256i p01 = _mm256_packs_epi32(q[0], q[1]), p23 = _mm256_packs_epi32(q[2], q[3]);
  __m256i b = _mm256_packs_epi16(p01, p23);
  b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), b);
  const __m256i s32 = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
  __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s32), _mm256_extracti128_si256(s32, 1));
  h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4E));
  h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xB1));
  return _mm_cvtsi128_si32(h);
}

// Points at 32 (or `n`) floats of x from `start`, zero-padded into buf past the end of the row.
inline const float* Span(const float* x, int64_t cols, int64_t start, int64_t n, float* buf) {
  if (start + n <= cols) return x + start;
  for (int64_t k = 0; k < n; ++k) buf[k] = start + k < cols ? x[start + k] : 0.0f;
  return buf;
}

void QuantA8(const float* x, int64_t cols, void* out_v) {
  BlockA8* out = static_cast<BlockA8*>(out_v);
  float buf[kQ8Block];
  for (int64_t b = 0; b * kQ8Block < cols; ++b) {
    const float* v = Span(x, cols, b * kQ8Block, kQ8Block, buf);
    const float amax = AbsMax32(v);
    const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    out[b].d = amax / 127.0f;
    Quant32(v, id, out[b].qs);
  }
}

void QuantA8K(const float* x, int64_t cols, void* out_v) {
  BlockA8K* out = static_cast<BlockA8K*>(out_v);
  float buf[kQ4KBlock];
  for (int64_t b = 0; b * kQ4KBlock < cols; ++b) {
    const float* v = Span(x, cols, b * kQ4KBlock, kQ4KBlock, buf);
    float amax = 0.0f;
    for (int j = 0; j < 8; ++j) amax = amax > AbsMax32(v + 32 * j) ? amax : AbsMax32(v + 32 * j);
    const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    out[b].d = amax / 127.0f;
    for (int j = 0; j < 8; ++j)
      out[b].bsums[j] = static_cast<int16_t>(Quant32(v + 32 * j, id, out[b].qs + 32 * j));
  }
}

constexpr MatMulKernels MakeAvx2() {
  MatMulKernels k;
  k.name = "avx2";
  k.tile[static_cast<int>(WeightFormat::kF32)] = &Tile<FloatImpl<F32Loader>>;
  k.tile[static_cast<int>(WeightFormat::kBF16)] = &Tile<FloatImpl<Bf16Loader>>;
  k.tile[static_cast<int>(WeightFormat::kF16)] = &Tile<FloatImpl<F16Loader>>;
  k.tile[static_cast<int>(WeightFormat::kQ8_0)] = &Tile<Q8Impl>;
  k.tile[static_cast<int>(WeightFormat::kQ4K)] = &Tile<Q4KImpl>;
  k.shape[static_cast<int>(WeightFormat::kF32)] = {4, 3, 4};
  k.shape[static_cast<int>(WeightFormat::kBF16)] = {4, 3, 4};
  k.shape[static_cast<int>(WeightFormat::kF16)] = {4, 3, 4};
  k.shape[static_cast<int>(WeightFormat::kQ8_0)] = {4, 2, 4};
  k.shape[static_cast<int>(WeightFormat::kQ4K)] = {4, 2, 4};
  k.quantize_a8 = &QuantA8;
  k.quantize_a8k = &QuantA8K;
  return k;
}

constinit const MatMulKernels kAvx2 = MakeAvx2();

}  // namespace

const MatMulKernels& Avx2Kernels() { return kAvx2; }

}  // namespace phi4mm
