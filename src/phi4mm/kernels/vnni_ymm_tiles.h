// The ymm vpdpbusd tiles of the avxvnni table (Q4_K x A8K, and Q8_0 over weights in eight-block
// groups x A8Group), written once and compiled twice: by quant_kernels_avxvnni.cc with VEX encoding
// (-mavxvnni: AVX-VNNI, the Intel client cores since Alder Lake, which have no AVX-512, and Zen 5)
// and by quant_kernels_avx512.cc with EVEX encoding (AVX-512 VL/VNNI), where the avx512 tables reuse
// the Q4_K tile (over A8KLine activations) and the Q8_0 tile, and where the avxvnni table's EVEX
// copy runs on AVX-512 CPUs without AVX-VNNI (isa.h, AvxVnniEncoding). The two copies differ only
// in the encoding the compiler picks for the same intrinsic semantics. Everything here has internal
// linkage (an anonymous namespace), so each copy keeps its own and the linker never mixes them
// (check_isa_symbols.sh). Include only from those two files.
//
// VEX code can address only 16 ymm registers (EVEX has 32): a Q4_K tile keeps R*N float
// accumulators, R*N int32 sums, the two unpacked halves of one weight row and the nibble mask; a
// Q8_0 tile keeps R*N accumulators, R*N int32 sums and one weight vector. The avxvnni table's
// Q4_K shapes were measured on AVX-VNNI hardware, its Q8_0 shapes chosen to fit 16 registers
// (MakeAvxVnniTable).
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "phi4mm/kernels/quant.h"
#include "phi4mm/kernels/quant_kernels.h"
#include "phi4mm/kernels/tile_common.h"

#if !(defined(__AVX512VNNI__) && defined(__AVX512VL__)) && !defined(__AVXVNNI__)
#error "vnni_ymm_tiles.h needs AVX-VNNI or AVX-512 VL/VNNI"
#endif

namespace phi4mm {
namespace {

// u (unsigned bytes) x s (signed bytes), each group of four products added into its int32 lane.
inline __m256i Dpbusd(__m256i acc, __m256i u, __m256i s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpbusd_epi32(acc, u, s);
#else
  return _mm256_dpbusd_avx_epi32(acc, u, s);
#endif
}


inline float HSum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline int64_t BlocksQ4K(int64_t cols) { return (cols + kQ4KBlock - 1) / kQ4KBlock; }
inline int64_t BlocksQ8(int64_t cols) { return (cols + kQ8Block - 1) / kQ8Block; }

// The float accumulators of the ymm tiles (RunTile's Acc, Zero and HSum).
struct YmmAcc {
  using Acc = __m256;
  static __m256 Zero() { return _mm256_setzero_ps(); }
  static float HSum(__m256 v) { return HSum8(v); }
};

// The loop every vpdpbusd tile shares (here and in quant_kernels_avx512.cc): R*N float
// accumulators, the weight-row and activation-row pointers, then one Impl::Step per group of
// Impl::kGroup weight blocks (the last group, when the row's block count is not a multiple, with
// kFull = false: Step reads zero blocks past the end), each group's weight bytes prefetched for a
// later tile while it runs (GEMV tiles always; batch tiles when t.prefetch), and a horizontal sum
// per (weight row, activation row). Impl supplies Acc (the float vector), W and A (the weight and
// activation block types), kGroup, Blocks(cols), Zero(), HSum(Acc) and Step<R, N, kFull>(w, a, g,
// nb, acc). Every loop over r and i is unrolled by pragma: otherwise GCC keeps the accumulators as
// stack arrays and stores them every block (27 stack stores per block in the Q4_K 3x4 tile before,
// 6 after; 2x8 on 8 rows, one thread: best 76.7 -> 82.4 GMAC/s, and 83.3 -> 91.3 for 3x4, with the
// per-tile prefetch distance 87.7 / 92.3).
template <class Impl, int R, int N>
void RunTile(const TileArgs& t) {
  using Acc = typename Impl::Acc;
  Acc acc[R][N];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int i = 0; i < N; ++i) acc[r][i] = Impl::Zero();
  const typename Impl::W* w[R];
  const typename Impl::A* a[N];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) w[r] = reinterpret_cast<const typename Impl::W*>(t.w + r * t.w_stride);
#pragma GCC unroll 8
  for (int i = 0; i < N; ++i) a[i] = reinterpret_cast<const typename Impl::A*>(t.a + i * t.a_stride);
  constexpr int G = Impl::kGroup;
  const int64_t nb = Impl::Blocks(t.cols), full = nb / G;
  const TilePrefetch pf(t, R, G * R * static_cast<int64_t>(sizeof(typename Impl::W)));
  for (int64_t g = 0; g < full; ++g) {
    if (N == 1 || t.prefetch) pf.At(g);
    Impl::template Step<R, N, true>(w, a, g, nb, acc);
  }
  if (nb % G != 0) Impl::template Step<R, N, false>(w, a, full, nb, acc);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int i = 0; i < N; ++i) Store(t, r, i, Impl::HSum(acc[r][i]));
}

// The activation side of the ymm Q4_K tile: the A8K rows as quantized (BlockA8K, 276 bytes, so
// half of the 32-byte loads cross a cache line), or repacked per block into whole cache lines
// (A8KLine). Each gives the block's int8 positions, its scale broadcast, and its sub-block sums as
// floats.
struct A8KRows {
  using Block = BlockA8K;
  static const int8_t* Qs(const BlockA8K& a) { return a.qs; }
  static __m256 Scale(const BlockA8K& a) { return _mm256_broadcast_ss(&a.d); }
  static __m256 Bsums(const BlockA8K& a) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a.bsums))));
  }
};

// One A8K block in five cache lines: the 256 positions (BlockA8K's order), the eight sub-block sums
// as floats (exact: |bsum| <= 32 * 127), the scale. Written by PackA8KLines.
struct alignas(64) A8KLine {
  int8_t qs[256];
  float bs[8];
  float d;
};
static_assert(sizeof(A8KLine) == 320, "A8KLine must be 320 bytes (five cache lines)");

struct A8KLines {
  using Block = A8KLine;
  static const int8_t* Qs(const A8KLine& a) { return a.qs; }
  static __m256 Scale(const A8KLine& a) { return _mm256_broadcast_ss(&a.d); }
  static __m256 Bsums(const A8KLine& a) { return _mm256_load_ps(a.bs); }
};

// Q4_K x A8K with vpdpbusd on ymm, one block per step: per (weight row, activation row) 8
// vpdpbusd into int32 lanes = sub-blocks (at most 32 * 15 * 127 per lane), then the float tail of
// the AVX2 tile: acc += (isum * (d*sc) - (dmin*mn) * bsum) * da. Per weight row and 64-position
// chunk the nibbles are unpacked once (low and high half) and reused for the N activation rows,
// whose bytes are the memory operands of vpdpbusd. Live registers: R*N int32 sums, R*N float
// accumulators, 2*R unpacked halves and the nibble mask. Layout is A8KRows or A8KLines.
template <class Layout>
struct Q4KVnniImpl : YmmAcc {
  using W = BlockQ4K;
  using A = typename Layout::Block;
  static constexpr int kGroup = 1;
  static int64_t Blocks(int64_t cols) { return BlocksQ4K(cols); }

  template <int R, int N, bool kFull>
  static void Step(const BlockQ4K* const (&w)[R], const A* const (&a)[N], int64_t b, int64_t,
                   __m256 (&acc)[R][N]) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256i s32[R][N];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
      for (int i = 0; i < N; ++i) s32[r][i] = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[r][b].qs + c * 32));
        const __m256i lo = _mm256_and_si256(bits, m4);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
#pragma GCC unroll 8
        for (int i = 0; i < N; ++i) {
          const __m256i* aq = reinterpret_cast<const __m256i*>(Layout::Qs(a[i][b]) + c * 64);
          s32[r][i] = Dpbusd(s32[r][i], lo, _mm256_loadu_si256(aq));
          s32[r][i] = Dpbusd(s32[r][i], hi, _mm256_loadu_si256(aq + 1));
        }
      }
    }
    __m256 dsc[R], dmn[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256i sc = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w[r][b].scales)));
      const __m256i mn = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w[r][b].mins)));
      dsc[r] = _mm256_mul_ps(_mm256_cvtepi32_ps(sc), _mm256_set1_ps(_cvtsh_ss(w[r][b].d)));
      dmn[r] = _mm256_mul_ps(_mm256_cvtepi32_ps(mn), _mm256_set1_ps(_cvtsh_ss(w[r][b].dmin)));
    }
#pragma GCC unroll 8
    for (int i = 0; i < N; ++i) {
      const __m256 da = Layout::Scale(a[i][b]);
      const __m256 bs = Layout::Bsums(a[i][b]);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m256 v = _mm256_fnmadd_ps(dmn[r], bs, _mm256_mul_ps(_mm256_cvtepi32_ps(s32[r][i]), dsc[r]));
        acc[r][i] = _mm256_fmadd_ps(v, da, acc[r][i]);
      }
    }
  }

  template <int R, int N>
  static void Run(const TileArgs& t) { RunTile<Q4KVnniImpl, R, N>(t); }
};

// The last group of a row in the eight-block group layout (quant.h) holds m < 8 blocks: its step
// vectors are 4m bytes and its scales 2m, the row's last bytes. The vectors load as m lanes with
// zeros above: an AVX-512 masked load in the EVEX copy, vpmaskmovd (AVX2) in the VEX one, the same
// lanes either way (vpmaskmovd measured 3 % slower on SigLIP's 1152-wide rows, whose last group is
// one in five, so the EVEX copy keeps its own). The scales load as the 16 bytes that end where the
// row ends, moved down to lane 0 by a byte shuffle that zeroes the lanes above m, in both copies.
// No byte outside the row is read, and the zero lanes meet zero activation blocks of scale 0.
inline __m256i LoadLanes(const uint8_t* p, int64_t m) {
#if defined(__AVX512VL__)
  return _mm256_maskz_loadu_epi32(static_cast<__mmask8>((1u << m) - 1), p);
#else
  const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(m)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  return _mm256_maskload_epi32(reinterpret_cast<const int*>(p), mask);
#endif
}

// The m (1..7) f16 scales at p..p+2m, p+2m being the row's end (at least 16 bytes after its start).
inline __m128i LoadLastScales(const uint8_t* p, int64_t m) {
  const __m128i tail = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * m - 16));
  const __m128i j = _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m128i from = _mm_add_epi8(j, _mm_set1_epi8(static_cast<char>(16 - 2 * m)));
  // Bytes j < 2m take tail[16 - 2m + j]; the others get the shuffle's zero (index bit 7 set).
  const __m128i keep = _mm_cmpgt_epi8(_mm_set1_epi8(static_cast<char>(2 * m)), j);
  return _mm_shuffle_epi8(tail, _mm_or_si128(from, _mm_andnot_si128(keep, _mm_set1_epi8(static_cast<char>(0x80)))));
}

// Q8_0 x A8 with vpdpbusd on ymm over weights in eight-block groups (WeightLayout::kQ8Groups,
// quant.h) and A8Group activations (quant_kernels.h), block k of the group in lane k. Per (weight
// row, activation row) and group: 8 vpdpbusd from the activation row's start vector, then one float
// tail for all eight blocks (convert, the weight and activation scales' product, FMA): 8 vpdpbusd
// and 3 float operations per 256 multiply-adds. The four-block tile it replaced in the avxvnni
// table spent 8 vpdpbusd, 2 vphaddd and 6 float operations, plus per weight row the starts of its
// unsigned activations (4 vpdpbusd per four blocks); on a Zen 4 the four-block zmm tile of the
// avx512 table, whose zmm operations take two passes there, the equivalent of 8 ymm vpdpbusd and
// 12 float operations. The weight vectors are loaded once per weight row and reused for the N
// activation rows, whose bytes are vpdpbusd's memory operands. Live registers: R*N sums, R*N
// float accumulators and one weight vector. Every (weight row, activation row) pair runs the same
// steps whatever the tile shape, so a row's result does not depend on the batch.
struct Q8GroupVnniImpl : YmmAcc {
  using W = BlockQ8_0;  // RunTile's unit (kGroup blocks per step, the prefetch's stride)
  using A = quant_internal::A8Group;
  static constexpr int kGroup = kQ8Group;
  static int64_t Blocks(int64_t cols) { return BlocksQ8(cols); }

  template <int R, int N, bool kFull>
  static void Step(const BlockQ8_0* const (&w)[R], const A* const (&a)[N], int64_t g, int64_t nb,
                   __m256 (&acc)[R][N]) {
    const int64_t m = kFull ? kQ8Group : nb - g * kQ8Group;
    __m256i sum[R][N];
#pragma GCC unroll 8
    for (int i = 0; i < N; ++i) {
      const __m256i start = _mm256_load_si256(reinterpret_cast<const __m256i*>(a[i][g].start));
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) sum[r][i] = start;
    }
#pragma GCC unroll 8
    for (int s = 0; s < 8; ++s) {
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const uint8_t* values = reinterpret_cast<const uint8_t*>(w[r]) + g * 256 + 4 * m * s;
        const __m256i wv = kFull ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(values)) : LoadLanes(values, m);
#pragma GCC unroll 8
        for (int i = 0; i < N; ++i)
          sum[r][i] = Dpbusd(sum[r][i], wv, _mm256_load_si256(reinterpret_cast<const __m256i*>(a[i][g].qs + 32 * s)));
      }
    }
    __m256 dw[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const uint8_t* scales = reinterpret_cast<const uint8_t*>(w[r]) + nb * kQ8Block + g * 16;
      dw[r] = _mm256_cvtph_ps(kFull ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(scales)) : LoadLastScales(scales, m));
    }
#pragma GCC unroll 8
    for (int i = 0; i < N; ++i) {
      const __m256 da = _mm256_load_ps(a[i][g].d);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r)
        acc[r][i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[r][i]), _mm256_mul_ps(dw[r], da), acc[r][i]);
    }
  }

  template <int R, int N>
  static void Run(const TileArgs& t) { RunTile<Q8GroupVnniImpl, R, N>(t); }
};

// Impl::Run<R, N> for R = nr in [1, kMaxTileRows] and N = na in [1, kMaxTileActs].
template <class Impl, int R = 1, int N = 1>
void Tile(const TileArgs& t) {
  if constexpr (R < kMaxTileRows) {
    if (t.nr > R) return Tile<Impl, R + 1, N>(t);
  }
  if constexpr (N < kMaxTileActs) {
    if (t.na > N) return Tile<Impl, R, N + 1>(t);
  }
  Impl::template Run<R, N>(t);
}

// The avxvnni table: the AVX2 table (float formats, activation quantizers, which every table
// shares bit for bit) with the two integer tiles above.
MatMulKernels MakeAvxVnniTable(const char* name) {
  MatMulKernels k = quant_internal::Avx2Kernels();
  k.name = name;
  k.tile[static_cast<int>(WeightFormat::kQ4K)] = &Tile<Q4KVnniImpl<A8KRows>>;
  k.tile[static_cast<int>(WeightFormat::kQ8_0)] = &Tile<Q8GroupVnniImpl>;
  k.layout[static_cast<int>(WeightFormat::kQ8_0)] = WeightLayout::kQ8Groups;
  k.pack_a8 = &quant_internal::PackA8Groups;
  k.packed_a8_row_bytes = &quant_internal::PackedA8GroupRowBytes;
  k.pack_a8k = nullptr;
  k.packed_a8k_row_bytes = nullptr;
  // Q4_K shapes measured with the VEX copy on an AVX-VNNI Intel Xeon (Sapphire Rapids class, the
  // core of Alder Lake's P-cores; TileShape, 1 thread, 16384x3072, GMAC/s, two or three rounds,
  // AVX2 table in brackets): 256 rows 3x3 69 / 75 (53 / 61), 3x4 66 / 72, 4x3 66 / 74, 2x4 61 / 64,
  // 1x6 53 / 54; 8 rows 2x8 82 / 85 (62 / 48), 1x8 65 / 85, 2x4 57 / 72; GEMV 2 rows 39 / 43, 4
  // rows 31 / 43. The wider shapes spill some sums to the stack in the VEX object (16 registers:
  // 3x3 keeps 9 accumulators and 9 sums), and still beat the 1-row shapes that fit, which redo the
  // weight side for every activation group.
  k.shape[static_cast<int>(WeightFormat::kQ4K)] = {2, 3, 3, 2, 8};
  // Q8_0 (the eight-block group tile): chosen to fit the VEX copy's 16 registers (2*R*N + 1), and
  // measured since with the VEX copy on the AVX-VNNI Xeon above (TileShape, 1 thread, 16384x3072,
  // GMAC/s, each shape in its own process, five alternating rounds at 256 rows and three at 8):
  // 256 rows 2x3 61-79, 3x3 67-85, 4x2 67-92 (medians 77, 73, 73); 8 rows 2x4 58-93, 3x4 65-99,
  // 4x2 55-79, 2x8 60-76. No shape stands out of that VM's noise, so these stay. The EVEX copy on
  // a Zen 4 EPYC (TileShape, 1 thread, 16384x3072, GMAC/s, two rounds; the four-block folded tile
  // it replaced in brackets, at its shapes chosen on the Xeon): 256 rows 2x3 112 / 116 (3x3 74 /
  // 74), 3x2 123 / 126, 2x2 92 / 92; 8 rows 2x4 88 / 86 (2x8 85 / 85), 2x3 76 / 78. On the Xeon the
  // folded tile measured 3x3 51 / 42 / 50 at 256 rows and 2x8 54 / 70 / 71 at 8 rows.
  k.shape[static_cast<int>(WeightFormat::kQ8_0)] = {2, 2, 3, 2, 4};
  return k;
}

}  // namespace
}  // namespace phi4mm
