// AVX2 + FMA + F16C kernel table (compiled with -mavx2 -mfma -mf16c; only reached through the
// dispatch in quant_kernels.cc when the CPU has those features).
//  - f32/bf16/f16 weights x f32 activations: float_tile_hwy-inl.h's tile (Highway, shared with the
//    NEON table), R weight rows x N activation rows, each weight vector widened once.
//  - Q8_0 x A8 over activations packed in groups of four blocks (pack_a8), each vector holding
//    the same half of two blocks: sign trick (|w| as the unsigned maddubs operand), madd to int32,
//    two adds and one hadd fold the four blocks into one vector, so one convert and FMA per four
//    blocks with their scale products.
//  - Q4_K x A8K: on the sub-block-interleaved block order, unsigned nibbles straight into
//    maddubs, int16 accumulation over the block, one madd with ones to int32 lanes = sub-blocks,
//    then per block a convert and the float scaling by d*sc, dmin*mn and the block sums.
// Activation quantizers reproduce the scalar reference bit for bit (same max, same reciprocal,
// round-to-nearest-even conversion).
#include <immintrin.h>

#include <algorithm>

#include "phi4mm/kernels/avx2_reduce.h"
#include "phi4mm/kernels/float_tile_hwy-inl.h"
#include "phi4mm/kernels/quant.h"
#include "phi4mm/kernels/quant_kernels.h"
#include "phi4mm/kernels/tile_common.h"

namespace phi4mm {

namespace {

using avx2::HSum;


inline float HalfToFloat(uint16_t h) { return _cvtsh_ss(h); }

using A8Quad = quant_internal::A8PairHalves;

// Q8_0 x A8, four blocks per step over A8Quad activations. Each weight vector holds the same half
// of two blocks (built once per weight row and step, the layout of A8Quad), so the eight int32
// lanes of a madd belong to two blocks, four each: the two halves of a block pair are added lane
// for lane, and one hadd folds the two pairs into lanes (b0 b0 b2 b2 | b1 b1 b3 b3), matching the
// scale order of A8Quad. Per (weight row, activation row) and block: the sign trick (|w| as the
// unsigned maddubs operand, the activation signed by w; |w| is taken once per weight row and
// block and reused for the N activation rows) and a madd to int32; per four blocks two adds, one
// hadd, one convert, one product of the scales and one FMA. The integer sums are exact (at most
// 4 * 2 * 127 * 127 per lane). Every (weight row, activation row) pair runs the same steps in the
// same order whatever the tile shape, so a row's result does not depend on the batch.
struct Q8QuadImpl {
  static __m256i LoadHalves(const BlockQ8_0& lo, const BlockQ8_0& hi, int h) {
    return _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(hi.qs + 16 * h), reinterpret_cast<const __m128i*>(lo.qs + 16 * h));
  }

  template <int R, int N, bool kFull>
  static void Step(const BlockQ8_0* const (&w)[R], const A8Quad* const (&a)[N], int64_t q, int nk,
                   __m256 (&acc)[R][N]) {
    static const BlockQ8_0 kZero{};
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i scale_order = _mm256_setr_epi32(0, 0, 2, 2, 1, 1, 3, 3);
    const int64_t b0 = 4 * q;
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const BlockQ8_0* blk[4];
      uint64_t d16 = 0;  // the four f16 scales, built in a general register (fewer vector uops)
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        const bool in = kFull || k < nk;
        blk[k] = in ? &w[r][b0 + k] : &kZero;
        d16 |= static_cast<uint64_t>(blk[k]->d) << (16 * k);
      }
      __m256i wv[4], wabs[4];
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) {
        wv[v] = LoadHalves(*blk[2 * (v / 2)], *blk[2 * (v / 2) + 1], v % 2);
        wabs[v] = _mm256_abs_epi8(wv[v]);
      }
      const __m128 dw4 = _mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<int64_t>(d16)));
      const __m256 dw = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(dw4), scale_order);
#pragma GCC unroll 4
      for (int i = 0; i < N; ++i) {
        const A8Quad& aq = a[i][q];
        __m256i p[4];
#pragma GCC unroll 4
        for (int v = 0; v < 4; ++v) {
          const __m256i av = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(aq.qs + 32 * v));
          p[v] = _mm256_madd_epi16(_mm256_maddubs_epi16(wabs[v], _mm256_sign_epi8(av, wv[v])), ones);
        }
        const __m256i h = _mm256_hadd_epi32(_mm256_add_epi32(p[0], p[1]), _mm256_add_epi32(p[2], p[3]));
        const __m256 scale = _mm256_mul_ps(dw, _mm256_loadu_ps(aq.d));
        acc[r][i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(h), scale, acc[r][i]);
      }
    }
  }

  template <int R, int N>
  static void Run(const TileArgs& t) {
    __m256 acc[R][N];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int i = 0; i < N; ++i) acc[r][i] = _mm256_setzero_ps();
    const BlockQ8_0* w[R];
    const A8Quad* a[N];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) w[r] = reinterpret_cast<const BlockQ8_0*>(t.w + r * t.w_stride);
#pragma GCC unroll 4
    for (int i = 0; i < N; ++i) a[i] = reinterpret_cast<const A8Quad*>(t.a + i * t.a_stride);
    const int64_t nb = CeilDiv(t.cols, kQ8Block), full = nb / 4;
    const TilePrefetch pf(t, R, 4 * R * static_cast<int64_t>(sizeof(BlockQ8_0)));
    for (int64_t q = 0; q < full; ++q) {
      if (N == 1 || t.prefetch) pf.At(q);
      Step<R, N, true>(w, a, q, 4, acc);
    }
    if (nb % 4 != 0) Step<R, N, false>(w, a, full, static_cast<int>(nb % 4), acc);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int i = 0; i < N; ++i) Store(t, r, i, HSum(acc[r][i]));
  }
};

// Q4_K x A8K on the interleaved block order (quant.h): each 32-position half of a block holds 4
// weights of every sub-block, so maddubs pairs and madd quads never mix sub-blocks and int32 lane
// j of a half's sum is sub-block j. Per block and (weight row, activation row) the 8 maddubs
// results are added in int16: each lane is q0*a0 + q1*a1 with nibbles q in 0..15 and activations
// |a| <= 127, so |lane| <= 2*15*127 = 3810 and the sum of 8 stays within 8*3810 = 30480 < 32767
// (no wrap, no saturation). One madd with ones then widens to int32 lanes = sub-blocks, and the
// float tail is acc += (isum * (d*sc) - (dmin*mn) * bsum) * da, with d*sc and dmin*mn widened once
// per weight row and block, bsum once per activation row and block. Per weight row and 64-position
// chunk the nibbles are unpacked once and reused for the N activation rows; live registers are
// the R*N int16 sums, the R*N float accumulators, the unpacked chunk and a few constants.
struct Q4KImpl {
  template <int R, int N>
  static void Run(const TileArgs& t) {
    __m256 acc[R][N];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int i = 0; i < N; ++i) acc[r][i] = _mm256_setzero_ps();
    const BlockQ4K* w[R];
    const BlockA8K* a[N];
    for (int r = 0; r < R; ++r) w[r] = reinterpret_cast<const BlockQ4K*>(t.w + r * t.w_stride);
    for (int i = 0; i < N; ++i) a[i] = reinterpret_cast<const BlockA8K*>(t.a + i * t.a_stride);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i ones = _mm256_set1_epi16(1);
    const int64_t nb = CeilDiv(t.cols, kQ4KBlock);
    const TilePrefetch pf(t, R, R * static_cast<int64_t>(sizeof(BlockQ4K)));
    for (int64_t b = 0; b < nb; ++b) {
      if (N == 1 || t.prefetch) pf.At(b);
      __m256i s16[R][N];
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
          const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[r][b].qs + c * 32));
          const __m256i lo = _mm256_and_si256(bits, m4);
          const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
#pragma GCC unroll 4
          for (int i = 0; i < N; ++i) {
            const __m256i* aq = reinterpret_cast<const __m256i*>(a[i][b].qs + c * 64);
            const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, _mm256_loadu_si256(aq)),
                                               _mm256_maddubs_epi16(hi, _mm256_loadu_si256(aq + 1)));
            s16[r][i] = c == 0 ? p : _mm256_add_epi16(s16[r][i], p);
            // Keeps the sum a chain: GCC would otherwise rebalance the block's 8 int16 adds into a
            // tree, computing all 8*R*N maddubs first and spilling them.
            __asm__("" : "+x"(s16[r][i]));
          }
        }
      }
      // One tail for every tile shape (the one-row GEMV too), so a row's sum does not depend on
      // the tile it is computed in (tests/batch_invariance_test.cc).
      __m256 dsc[R], dmn[R];
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m256i sc = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w[r][b].scales)));
        const __m256i mn = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w[r][b].mins)));
        dsc[r] = _mm256_mul_ps(_mm256_cvtepi32_ps(sc), _mm256_set1_ps(HalfToFloat(w[r][b].d)));
        dmn[r] = _mm256_mul_ps(_mm256_cvtepi32_ps(mn), _mm256_set1_ps(HalfToFloat(w[r][b].dmin)));
      }
#pragma GCC unroll 4
      for (int i = 0; i < N; ++i) {
        const __m256 da = _mm256_broadcast_ss(&a[i][b].d);
        const __m256 bs = _mm256_cvtepi32_ps(
            _mm256_cvtepi16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a[i][b].bsums))));
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
          const __m256 isum = _mm256_cvtepi32_ps(_mm256_madd_epi16(s16[r][i], ones));
          const __m256 v = _mm256_fnmadd_ps(dmn[r], bs, _mm256_mul_ps(isum, dsc[r]));
          acc[r][i] = _mm256_fmadd_ps(v, da, acc[r][i]);
        }
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int i = 0; i < N; ++i) {
        Store(t, r, i, HSum(acc[r][i]));
      }
  }
};

// Instantiates Impl::Run<R, N> for every nr, na in [1, 4] (16 ymm registers hold no wider tile);
// more activation rows (up to kMaxTileActs) run as successive tiles of at most 4.
template <class Impl>
void Tile(const TileArgs& t) {
  static_assert(kMaxTileRows == 4, "extend the switch with kMaxTileRows");
  if (t.na > 4) {
    TileArgs part = t;
    for (int i = 0; i < t.na; i += 4) {
      part.na = std::min(4, t.na - i);
      part.a = t.a + static_cast<size_t>(i) * t.a_stride;
      part.y = t.y + i * t.ldy;
      part.prefetch = t.prefetch && i == 0;
      Tile<Impl>(part);
    }
    return;
  }
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

// Rounds 32 floats times `id` to int8, in order, into the returned vector; stores their sum in *sum.
inline __m256i Quant32(const float* v, float id, int* sum) {
  const __m256 s = _mm256_set1_ps(id);
  __m256i q[4];
  for (int k = 0; k < 4; ++k) q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(v + 8 * k), s));
  const __m256i p01 = _mm256_packs_epi32(q[0], q[1]), p23 = _mm256_packs_epi32(q[2], q[3]);
  const __m256i b = _mm256_packs_epi16(p01, p23);
  const __m256i s32 = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
  __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s32), _mm256_extracti128_si256(s32, 1));
  h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4E));
  h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xB1));
  *sum = _mm_cvtsi128_si32(h);
  return _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// Transposes 8x8 int32: on return v[h] holds dword h of every input v[j], j in lane order.
inline void Transpose8x8Epi32(__m256i v[8]) {
  __m256i t[8], u[8];
  for (int k = 0; k < 4; ++k) {
    t[2 * k] = _mm256_unpacklo_epi32(v[2 * k], v[2 * k + 1]);      // dwords 0,1 | 4,5 of the pair
    t[2 * k + 1] = _mm256_unpackhi_epi32(v[2 * k], v[2 * k + 1]);  // dwords 2,3 | 6,7
  }
  for (int k = 0; k < 2; ++k) {
    u[4 * k] = _mm256_unpacklo_epi64(t[4 * k], t[4 * k + 2]);      // dword 0 | 4 of 4 inputs
    u[4 * k + 1] = _mm256_unpackhi_epi64(t[4 * k], t[4 * k + 2]);  // 1 | 5
    u[4 * k + 2] = _mm256_unpacklo_epi64(t[4 * k + 1], t[4 * k + 3]);  // 2 | 6
    u[4 * k + 3] = _mm256_unpackhi_epi64(t[4 * k + 1], t[4 * k + 3]);  // 3 | 7
  }
  for (int h = 0; h < 4; ++h) {
    v[h] = _mm256_permute2x128_si256(u[h], u[4 + h], 0x20);
    v[h + 4] = _mm256_permute2x128_si256(u[h], u[4 + h], 0x31);
  }
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
    int sum;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].qs), Quant32(v, id, &sum));
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
    // Sub-block j quantized in order is 8 dwords of 4 consecutive elements; dword h goes to
    // position h*32 + j*4 (quant.h's Q4KPos), an 8x8 dword transpose.
    __m256i q[8];
    for (int j = 0; j < 8; ++j) {
      int sum;
      q[j] = Quant32(v + 32 * j, id, &sum);
      out[b].bsums[j] = static_cast<int16_t>(sum);
    }
    Transpose8x8Epi32(q);
    for (int h = 0; h < 8; ++h) _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].qs + 32 * h), q[h]);
  }
}

constexpr MatMulKernels MakeAvx2() {
  MatMulKernels k;
  k.name = "avx2";
  k.tile[static_cast<int>(WeightFormat::kF32)] = &Tile<HWY_NAMESPACE::FloatTile<HWY_NAMESPACE::F32Rows>>;
  k.tile[static_cast<int>(WeightFormat::kBF16)] = &Tile<HWY_NAMESPACE::FloatTile<HWY_NAMESPACE::Bf16Rows>>;
  k.tile[static_cast<int>(WeightFormat::kF16)] = &Tile<HWY_NAMESPACE::FloatTile<HWY_NAMESPACE::F16Rows>>;
  k.tile[static_cast<int>(WeightFormat::kQ8_0)] = &Tile<Q8QuadImpl>;
  k.tile[static_cast<int>(WeightFormat::kQ4K)] = &Tile<Q4KImpl>;
  k.shape[static_cast<int>(WeightFormat::kF32)] = {4, 3, 4, 3, 4};
  k.shape[static_cast<int>(WeightFormat::kBF16)] = {4, 3, 4, 3, 4};
  k.shape[static_cast<int>(WeightFormat::kF16)] = {4, 3, 4, 3, 4};
  // Q8_0 over four-block groups (TileShape, 1 thread, 16384x3072, on the AVX-512 Xeon with the AVX2
  // table; GMAC/s, three rounds): 256 rows 2x4 28-34, 3x4 30-34, 4x4 27-34, 4x3 25-34, 4x2 26-31
  // (one block per step: 22-27 at every shape); 4 and 8 rows 2x4 26-33; GEMV 4 rows 19-25 (14-19).
  // With the two-block halves (one hadd per four blocks instead of three), on the Zen 5 EPYC, best
  // of six: 256 rows 2x4 63, 3x4 58, 4x4 65 (three hadds: 51, 52, 53).
  k.shape[static_cast<int>(WeightFormat::kQ8_0)] = {4, 2, 4, 2, 4};
  // Q4_K, TileShape bench (1 thread, 16384x3072, n = 256; GMAC/s): 3x4 62, 4x4 62, 3x3 61,
  // 4x3 61, 2x4 59. GEMV: 4 rows 41, 2 rows 41, 1 row 38.
  k.shape[static_cast<int>(WeightFormat::kQ4K)] = {4, 3, 4, 3, 4};
  k.quantize_a8 = &QuantA8;
  k.quantize_a8k = &QuantA8K;
  k.pack_a8 = &quant_internal::PackA8PairHalves;
  k.packed_a8_row_bytes = &quant_internal::PackedA8PairHalvesRowBytes;
  return k;
}

constinit const MatMulKernels kAvx2 = MakeAvx2();

}  // namespace

const MatMulKernels& quant_internal::Avx2Kernels() { return kAvx2; }

}  // namespace phi4mm
