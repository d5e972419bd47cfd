// AVX-512 F/BW/VL/VNNI kernel tables (compiled with -mavx2 -mfma -mf16c -mavx512f -mavx512bw
// -mavx512vl -mavx512vnni; only reached through the dispatch in quant_kernels.cc when the CPU has
// those features). Three tables come from here:
//  - the EVEX copy of the avxvnni table (vnni_ymm_tiles.h: the AVX2 table with ymm vpdpbusd tiles
//    for Q4_K and for Q8_0 over weights in eight-block groups, WeightLayout::kQ8Groups, repacked at
//    load), for AVX-512 CPUs that lack AVX-VNNI, and for testing that table's source on them;
//  - "avx512": the avxvnni table's Q4_K tile over activations repacked into whole cache lines
//    (A8KLine, pack_a8k), and its Q8_0 tile, with 32 registers for wider tiles;
//  - "avx512zmm" (CPUs with full-rate 512-bit vpdpbusd): the Q4_K tile holds two blocks per zmm,
//    and the Q8_0 tile four blocks per zmm, both over plain rows and activations packed for them.
// The float formats and the activation quantizers are the AVX2 table's.
#include <immintrin.h>

#include <cstring>

#include "phi4mm/kernels/quant.h"
#include "phi4mm/kernels/quant_kernels.h"
#include "phi4mm/kernels/tile_common.h"
#include "phi4mm/kernels/vnni_ymm_tiles.h"

namespace phi4mm {

namespace {

// GCC 12 reports the _mm512_undefined_* pass-through operand inside its own zmm intrinsics
// (convert, insert, extract) as maybe-uninitialized; the warning is about the header, not this code.
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

inline float HSum16(__m512 v) {
  return HSum8(_mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
}

// The float accumulators of the zmm tiles (RunTile's Acc, Zero and HSum).
struct ZmmAcc {
  using Acc = __m512;
  static __m512 Zero() { return _mm512_setzero_ps(); }
  static float HSum(__m512 v) { return HSum16(v); }
};

// [lo x 8, hi x 8] as one zmm of floats.
inline __m512 Halves(float lo, float hi) {
  return _mm512_castpd_ps(
      _mm512_insertf64x4(_mm512_castps_pd(_mm512_set1_ps(lo)), _mm256_castps_pd(_mm256_set1_ps(hi)), 1));
}

// The zmm Q8_0 tile's activation layout (MatMulKernels::pack_a8 of both avx512 tables): per group
// of four A8 blocks, bytes 0-15 of the four blocks (block k at bytes 16k..16k+15), then their bytes
// 16-31 the same way, both with the sign bit flipped (a ^ 0x80 = a + 128, unsigned, for vpdpbusd),
// then each block's scale on its four int32 lanes. A missing last block is a zero block with scale
// 0. Packing once per matrix product takes the per-activation-row work (loads, inserts, the flip,
// the scale broadcasts) out of every weight-row tile.
struct A8Quad {
  uint8_t lo[64];
  uint8_t hi[64];
  float d[16];
};
static_assert(sizeof(A8Quad) == 192, "A8Quad must be 192 bytes (three cache lines)");

size_t PackedA8QuadRowBytes(int64_t cols) { return static_cast<size_t>((BlocksQ8(cols) + 3) / 4) * sizeof(A8Quad); }

void PackA8Quads(const uint8_t* a8_row, int64_t cols, uint8_t* out) {
  const BlockA8* b = reinterpret_cast<const BlockA8*>(a8_row);
  A8Quad* o = reinterpret_cast<A8Quad*>(out);
  const int64_t nb = BlocksQ8(cols);
  for (int64_t q = 0; 4 * q < nb; ++q)
    for (int k = 0; k < 4; ++k) {
      const int64_t blk = 4 * q + k;
      const bool in = blk < nb;
      for (int j = 0; j < 16; ++j) {
        o[q].lo[16 * k + j] = static_cast<uint8_t>((in ? static_cast<uint8_t>(b[blk].qs[j]) : 0) ^ 0x80);
        o[q].hi[16 * k + j] = static_cast<uint8_t>((in ? static_cast<uint8_t>(b[blk].qs[16 + j]) : 0) ^ 0x80);
      }
      for (int j = 0; j < 4; ++j) o[q].d[4 * k + j] = in ? b[blk].d : 0.0f;
    }
}

// The avx512 table's Q4_K activations (MatMulKernels::pack_a8k): each A8K block as one A8KLine
// (vnni_ymm_tiles.h), so that every 32-byte load of the tile stays inside a cache line.
size_t PackedA8KLineRowBytes(int64_t cols) { return static_cast<size_t>(BlocksQ4K(cols)) * sizeof(A8KLine); }

void PackA8KLines(const uint8_t* a8k_row, int64_t cols, uint8_t* out) {
  const BlockA8K* b = reinterpret_cast<const BlockA8K*>(a8k_row);
  A8KLine* o = reinterpret_cast<A8KLine*>(out);
  const int64_t nb = BlocksQ4K(cols);
  for (int64_t k = 0; k < nb; ++k) {
    std::memcpy(o[k].qs, b[k].qs, sizeof(o[k].qs));
    for (int j = 0; j < 8; ++j) o[k].bs[j] = static_cast<float>(b[k].bsums[j]);
    o[k].d = b[k].d;
  }
}

alignas(64) constexpr BlockQ8_0 kZeroQ8Block{};

// Blocks 4q..4q+3 of a Q8_0 weight row into blk (zero blocks past the row's nb blocks unless
// kFull), and their four f16 scales gathered in one general register (block k's in bits 16k..16k+15).
template <bool kFull>
inline uint64_t QuadBlocks(const BlockQ8_0* row, int64_t q, int64_t nb, const BlockQ8_0* (&blk)[4]) {
  uint64_t d16 = 0;
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    blk[k] = kFull || 4 * q + k < nb ? &row[4 * q + k] : &kZeroQ8Block;
    d16 |= static_cast<uint64_t>(blk[k]->d) << (16 * k);
  }
  return d16;
}

// The Q8_0 tile of the avx512zmm table (and of the avx512 table before the eight-block groups):
// vpdpbusd on zmm, four blocks per register. Each weight
// vector holds the same half (bytes 0-15 or 16-31) of four blocks, block k in lanes 4k..4k+3, so
// the two vpdpbusd of a (weight row, activation row) leave each block's sum in its own four lanes
// and the float tail (convert, scale product, FMA) runs once per four blocks: 2 vpdpbusd and 3
// float operations per 128 multiply-adds. An earlier two-block tile (block b and b + 1 in the
// halves of a zmm) spent 2 vpdpbusd and 6 float operations on the same work, and its float tail
// bounded it: on a Zen 5 ~118 GMAC/s per thread at 8 rows, a quarter of the zmm vpdpbusd peak; on
// a Zen 4, whose zmm operations take two passes through the 256-bit units, the float multiplies
// and FMAs share the two pipes that run vpdpbusd, and the two-block tile ran 20-30% slower than
// this one at 8 and 256 rows (docs/benchmarks.md), so the ymm table used this tile too. The weight
// side (four 16-byte loads and two inserts per vector, the sign-trick start, the four scales) is
// built once per weight row and four blocks. Every (weight row, activation row) pair runs the same
// steps whatever the tile shape, so a row's result does not depend on the batch. The sign trick:
// the activations are packed with their sign bits flipped (a + 128, unsigned, as vpdpbusd wants),
// and each weight vector's sum starts at -vpdpbusd(0, 128, w), so that vpdpbusd(start, a + 128, w)
// is exactly sum(w * a).
struct Q8QuadVnniImpl : ZmmAcc {
  using W = BlockQ8_0;
  using A = A8Quad;
  static constexpr int kGroup = 4;
  static int64_t Blocks(int64_t cols) { return BlocksQ8(cols); }

  static __m512i LoadHalf(const BlockQ8_0* const (&blk)[4], int h) {
    const auto* p0 = reinterpret_cast<const __m128i*>(blk[0]->qs + 16 * h);
    const auto* p1 = reinterpret_cast<const __m128i*>(blk[1]->qs + 16 * h);
    const auto* p2 = reinterpret_cast<const __m128i*>(blk[2]->qs + 16 * h);
    const auto* p3 = reinterpret_cast<const __m128i*>(blk[3]->qs + 16 * h);
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu2_m128i(p1, p0)), _mm256_loadu2_m128i(p3, p2), 1);
  }

  template <int R, int N, bool kFull>
  static void Step(const BlockQ8_0* const (&w)[R], const A8Quad* const (&a)[N], int64_t q, int64_t nb,
                   __m512 (&acc)[R][N]) {
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
    const __m512i lanes = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    __m512i lo[R], hi[R], start[R];
    __m512 dw[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const BlockQ8_0* blk[4];
      const uint64_t d16 = QuadBlocks<kFull>(w[r], q, nb, blk);
      lo[r] = LoadHalf(blk, 0);
      hi[r] = LoadHalf(blk, 1);
      start[r] = _mm512_sub_epi32(_mm512_setzero_si512(),
                                  _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), flip, lo[r]), flip, hi[r]));
      dw[r] = _mm512_permutexvar_ps(lanes, _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<int64_t>(d16)))));
    }
#pragma GCC unroll 8
    for (int i = 0; i < N; ++i) {
      const A8Quad& aq = a[i][q];
      const __m512i alo = _mm512_loadu_si512(aq.lo), ahi = _mm512_loadu_si512(aq.hi);
      const __m512 da = _mm512_loadu_ps(aq.d);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m512i sum = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(start[r], alo, lo[r]), ahi, hi[r]);
        acc[r][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(dw[r], da), acc[r][i]);
      }
    }
  }

  template <int R, int N>
  static void Run(const TileArgs& t) { RunTile<Q8QuadVnniImpl, R, N>(t); }
};

// Q4_K x A8K with vpdpbusd on zmm, two blocks per register, for CPUs that run a 512-bit
// vpdpbusd at the rate of a 256-bit one (AMD Zen 5: twice the multiply-adds per cycle of the ymm
// tile above; an Intel Xeon splits a zmm one over the two ports that run two ymm ones). Block b
// sits in lanes 0-7 and block b + 1 in lanes 8-15 of every vector, so the float tail (convert,
// scale, the min term, FMA) runs once per two blocks, and each (weight row, activation row) costs
// 8 vpdpbusd and 4 float operations per 512 multiply-adds (the ymm tile: 16 and 8).
//
// The activation layout (MatMulKernels::pack_a8k): per pair of A8K blocks (2p, 2p + 1), for each
// 64-position chunk c the low-nibble positions c*64 + 0..31 of block 2p then of block 2p + 1 (64
// bytes), then the high-nibble positions c*64 + 32..63 likewise; then the two scales broadcast
// to 8 lanes each and the sub-block sums as floats (exact: |bsum| <= 32 * 127). 640 bytes, so
// every load is one aligned 64-byte line. The weight side loads chunk c of both blocks into one
// zmm and splits the nibbles there. A missing odd last block reads a zero block (scales 0), and
// its zero activations and scale make its lanes add exactly 0. The float accumulators keep even
// and odd blocks in separate lanes until the end, the same way for every tile shape.
struct A8KPair {
  int8_t qs[512];
  float d[16];
  float bs[16];
};
static_assert(sizeof(A8KPair) == 640, "A8KPair must be 640 bytes");

alignas(64) constexpr BlockQ4K kZeroQ4KBlock{};

size_t PackedA8KRowBytes(int64_t cols) { return static_cast<size_t>((BlocksQ4K(cols) + 1) / 2) * sizeof(A8KPair); }

void PackA8KPairs(const uint8_t* a8k_row, int64_t cols, uint8_t* out) {
  const BlockA8K* b = reinterpret_cast<const BlockA8K*>(a8k_row);
  A8KPair* o = reinterpret_cast<A8KPair*>(out);
  const int64_t nb = BlocksQ4K(cols);
  for (int64_t p = 0; 2 * p < nb; ++p) {
    for (int h = 0; h < 2; ++h) {
      const int64_t blk = 2 * p + h;
      const bool valid = blk < nb;
      for (int c = 0; c < 4; ++c)
        for (int half = 0; half < 2; ++half) {
          int8_t* dst = o[p].qs + (2 * c + half) * 64 + 32 * h;
          if (valid) std::memcpy(dst, b[blk].qs + c * 64 + half * 32, 32);
          else std::memset(dst, 0, 32);
        }
      for (int j = 0; j < 8; ++j) {
        o[p].d[8 * h + j] = valid ? b[blk].d : 0.0f;
        o[p].bs[8 * h + j] = valid ? static_cast<float>(b[blk].bsums[j]) : 0.0f;
      }
    }
  }
}

struct Q4KPairImpl : ZmmAcc {
  using W = BlockQ4K;
  using A = A8KPair;
  static constexpr int kGroup = 2;
  static int64_t Blocks(int64_t cols) { return BlocksQ4K(cols); }

  // Pair p = blocks 2p and 2p + 1 (a zero block past an odd row's end).
  template <int R, int N, bool kFull>
  static void Step(const BlockQ4K* const (&w)[R], const A8KPair* const (&a)[N], int64_t p, int64_t nb,
                   __m512 (&acc)[R][N]) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const int64_t b = 2 * p;
    const BlockQ4K* w0[R];
    const BlockQ4K* w1[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      w0[r] = &w[r][b];
      w1[r] = kFull || b + 1 < nb ? &w[r][b + 1] : &kZeroQ4KBlock;
    }
    __m512i s32[R][N];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
      for (int i = 0; i < N; ++i) s32[r][i] = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m512i bits = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w0[r]->qs + c * 32))),
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w1[r]->qs + c * 32)), 1);
        const __m512i lo = _mm512_and_si512(bits, m4);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(bits, 4), m4);
#pragma GCC unroll 8
        for (int i = 0; i < N; ++i) {
          s32[r][i] = _mm512_dpbusd_epi32(s32[r][i], lo, _mm512_load_si512(a[i][p].qs + c * 128));
          s32[r][i] = _mm512_dpbusd_epi32(s32[r][i], hi, _mm512_load_si512(a[i][p].qs + c * 128 + 64));
        }
      }
    }
    __m512 dsc[R], dmn[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m128i sc = _mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w0[r]->scales)),
                                            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(w1[r]->scales)));
      const __m128i mn = _mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w0[r]->mins)),
                                            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(w1[r]->mins)));
      dsc[r] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(sc)), Halves(_cvtsh_ss(w0[r]->d), _cvtsh_ss(w1[r]->d)));
      dmn[r] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(mn)),
                             Halves(_cvtsh_ss(w0[r]->dmin), _cvtsh_ss(w1[r]->dmin)));
    }
#pragma GCC unroll 8
    for (int i = 0; i < N; ++i) {
      const __m512 da = _mm512_load_ps(a[i][p].d);
      const __m512 bs = _mm512_load_ps(a[i][p].bs);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m512 v = _mm512_fnmadd_ps(dmn[r], bs, _mm512_mul_ps(_mm512_cvtepi32_ps(s32[r][i]), dsc[r]));
        acc[r][i] = _mm512_fmadd_ps(v, da, acc[r][i]);
      }
    }
  }

  template <int R, int N>
  static void Run(const TileArgs& t) { RunTile<Q4KPairImpl, R, N>(t); }
};

#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif

MatMulKernels MakeAvx512() {
  MatMulKernels k = MakeAvxVnniTable("avx512");
  k.tile[static_cast<int>(WeightFormat::kQ4K)] = &Tile<Q4KVnniImpl<A8KLines>>;
  k.pack_a8k = &PackA8KLines;
  k.packed_a8k_row_bytes = &PackedA8KLineRowBytes;
  // TileShape bench (1 thread, 16384x3072, n = 256; GMAC/s): 4x3 87, 3x3 83, 3x4 83, 4x4 79,
  // 2x4 71. GEMV: 4 rows 47, 2 rows 44, 1 row 40. A zmm variant (vpdpbusd on 64 positions, the
  // two halves folded per block) measured 79 at its best shape (4x4) and was dropped.
  // Batch, on the A8KLine activations (Zen 4 EPYC, TileShape, 1 thread, 16384x3072, 8 rows,
  // GMAC/s, two rounds): 3x8 137 / 138, 4x4 135 / 134, 3x4 132 / 126, 2x8 123 / 126, 4x8 124 / 124
  // (3x8 and 4x8 spill sums); on the unpacked A8K rows, whose loads cross cache lines, 3x4 127 /
  // 128 and 2x8 100 / 98. From memory (GemvCold, 2 threads, 8 rows, three rounds) 3x8 against
  // 3x4: 16384x3072 1.76-1.82 / 1.66-1.96 ms, 3072x8192 0.74-0.77 / 0.78-0.82, 5120x3072 0.48-0.50
  // / 0.49-0.67; end to end (concurrency 8, three alternating rounds) 53.5-55.2 against 51.8-54.0
  // tok/s. Four rows run 3x4 in one pass.
  k.shape[static_cast<int>(WeightFormat::kQ4K)] = {4, 4, 3, 3, 8};
  // Q8_0, the eight-block group tile on a Zen 4 EPYC (TileShape, 1 thread, 16384x3072, GMAC/s,
  // three rounds): 256 rows 4x3 142 / 147 / 147, 4x4 139 / 138 / 139, 3x3 139 / 124 / 131, 4x2 129
  // / 135 / 136, 3x4 132 / 119 / 131, 2x4 108 / 103 / 108; 8 rows 3x8 140 / 138 / 139, 4x8 119 /
  // 121 / 121, 2x8 120 / 118 / 115, 1x8 102 / 99 / 90, 4x4 94 / 90 / 89 (4 rows: 3x4 143 / 120 /
  // 112). The four-block zmm tile it replaced, same bench: 256 rows 3x4 83, 4x4 81, 4x3 79; 8
  // rows 4x8 93, 2x8 91, 3x4 85. Earlier, the four-block tile on the Zen 4 (TileShape, 1 thread,
  // 16384x3072, GMAC/s, two rounds): 256 rows 3x4 79 / 82, 4x4 81 / 80, 2x4 79 / 79, 4x3 73 / 75;
  // 8 rows 2x8 77 / 86, 4x4 70 / 80, 1x8 52 / 54. GEMV from memory (GemvCold, 2 threads, GB/s, three rounds, measured while
  // the tile prefetch (tile_common.h) still went into L1): 2 rows per tile 28-33 on 16384x3072, 1 row 29-32,
  // 4 rows 23-27. With the prefetch into L2 (three alternating rounds, GB/s): 16384x3072 1 row
  // 24-34, 2 rows 26-31, 4 rows 29-33; 3072x8192 28-32 / 25-30 / 25-30: alike within this VM's
  // noise, so 2 stays. Only the short-row LoRA shape 16384x320 favoured 1 row (19-21 / 14-18 / 14-15).
  k.shape[static_cast<int>(WeightFormat::kQ8_0)] = {2, 4, 3, 3, 8};
  return k;
}

}  // namespace

const MatMulKernels& quant_internal::Avx512ZmmKernels() {
  static const MatMulKernels k = [] {
    MatMulKernels z = MakeAvx512();
    z.name = "avx512zmm";
    z.tile[static_cast<int>(WeightFormat::kQ4K)] = &Tile<Q4KPairImpl>;
    z.pack_a8k = &PackA8KPairs;
    z.packed_a8k_row_bytes = &PackedA8KRowBytes;
    // TileShape bench on a Zen 5 EPYC (1 thread, 16384x3072, GMAC/s, two rounds; the ymm tile in
    // brackets): 256 rows 4x3 215 / 223 (130 / 143), 4x4 208 / 209, 3x3 189 / 179; 8 rows 4x4
    // 224 / 227 (147 / 143), 1x8 227 / 240, 2x8 223 / 211; one row, 2 rows per tile 94 / 87 (56).
    z.shape[static_cast<int>(WeightFormat::kQ4K)] = {2, 4, 3, 4, 4};
    z.tile[static_cast<int>(WeightFormat::kQ8_0)] = &Tile<Q8QuadVnniImpl>;
    z.layout[static_cast<int>(WeightFormat::kQ8_0)] = WeightLayout::kRows;
    z.pack_a8 = &PackA8Quads;
    z.packed_a8_row_bytes = &PackedA8QuadRowBytes;
    // Q8_0 on a Zen 5 (TileShape, 1 thread, 16384x3072, GMAC/s, best of 3; the earlier two-block
    // tile in brackets): 256 rows 3x4 134 (106), 4x4 131 (107), 2x4 112 (91); 8 rows 2x8 173
    // (117), 1x8 152 (93), 4x4 126 (114); one row, 4 rows per tile, 45 (46).
    z.shape[static_cast<int>(WeightFormat::kQ8_0)] = {4, 3, 4, 2, 8};
    return z;
  }();
  return k;
}

const MatMulKernels& quant_internal::AvxVnniEvexKernels() {
  static const MatMulKernels k = MakeAvxVnniTable("avxvnni-evex");
  return k;
}

const MatMulKernels& quant_internal::Avx512Kernels() {
  static const MatMulKernels k = MakeAvx512();
  return k;
}

}  // namespace phi4mm
