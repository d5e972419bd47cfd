// The matmul kernel family behind WeightMatrix: one table of function pointers per instruction
// set (scalar reference; AVX2+FMA+F16C, AVX-VNNI and AVX-512 VNNI on x86-64; NEON with and without the
// dot-product instructions on aarch64), and the table of the ISA the process runs (kernels/isa.h).
//
// A tile kernel computes y[i * ldy + r] (+)= dot(W row r, activation row i) for r < nr and
// i < na, with nr in [1, kMaxTileRows] and na in [1, kMaxTileActs], over all `cols` columns. Weight rows are in the matrix's
// storage format (rows `w_stride` bytes apart). Activation rows are float32 for the f32/bf16/f16
// formats, and pre-quantized blocks for the block formats (A8 rows for Q8_0, A8K rows for Q4_K),
// `a_stride` bytes apart. Kernels are stateless and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "phi4mm/kernels/isa.h"

namespace phi4mm {

// Storage formats of a WeightMatrix; the order indexes the kernel tables.
enum class WeightFormat { kF32, kBF16, kF16, kQ8_0, kQ4K };
inline constexpr int kNumWeightFormats = 5;
const char* WeightFormatName(WeightFormat f);
inline bool IsBlockFormat(WeightFormat f) { return f == WeightFormat::kQ8_0 || f == WeightFormat::kQ4K; }

// How a block-format matrix's rows are laid out in memory. kRows: the format's blocks in order, as
// files store them (every table reads it). kQ8Groups: Q8_0 rows in eight-block groups (quant.h),
// the compute layout of the avx512, avxvnni and neondot tables' Q8_0 tiles. A table names the
// layout its tile reads per format (MatMulKernels::layout); the model loaders repack to the active
// table's layout. Every layout of a format takes the same bytes per row.
enum class WeightLayout { kRows, kQ8Groups };
const char* WeightLayoutName(WeightLayout l);

inline constexpr int kMaxTileRows = 4;
inline constexpr int kMaxTileActs = 8;
// Calls with 1 < n <= kSmallBatch activation rows (a batched decode step) use TileShape's batch
// shape: all of them against each weight tile in one pass.
inline constexpr int64_t kSmallBatch = 16;

struct TileArgs {
  const uint8_t* w = nullptr;
  size_t w_stride = 0;
  int nr = 0;
  const uint8_t* a = nullptr;
  size_t a_stride = 0;
  int na = 0;
  int64_t cols = 0;
  float* y = nullptr;
  int64_t ldy = 0;
  bool accumulate = false;
  // Software-prefetch a later weight tile while this one runs (GEMV tiles always do): set for the
  // first activation tile of each weight tile, so a small batch (a batched decode step) streams the
  // weights with prefetch as one row does, while tiles that reuse cached rows issue none.
  bool prefetch = false;
};

using TileFn = void (*)(const TileArgs& t);
// Quantizes one activation row of `cols` floats into A8 (or A8K) blocks at `out`.
using QuantizeRowFn = void (*)(const float* x, int64_t cols, void* out);

// Preferred tile shape for a format: weight rows per tile for n == 1 (GEMV), weight rows x
// activation rows for a small batch (1 < n <= kSmallBatch) and for a GEMM (prefill). Rows at most
// kMaxTileRows, activation rows at most kMaxTileActs.
struct TileShape {
  int gemv_r = 1;
  int gemm_r = 1;
  int gemm_n = 1;
  int batch_r = 1;
  int batch_n = 1;
};

struct MatMulKernels {
  const char* name = "";
  TileFn tile[kNumWeightFormats] = {};
  TileShape shape[kNumWeightFormats] = {};
  // The weight layout each format's tile reads (WeightMatrix::WithLayout writes it).
  WeightLayout layout[kNumWeightFormats] = {};
  QuantizeRowFn quantize_a8 = nullptr;
  QuantizeRowFn quantize_a8k = nullptr;
  // Optional: the Q8_0 tile reads its activations in a layout of its own, which pack_a8 writes
  // from one A8 row (quantize_a8's output, itself the same bytes on every table) into
  // packed_a8_row_bytes(cols) bytes. Null: the tile reads the A8 rows.
  void (*pack_a8)(const uint8_t* a8_row, int64_t cols, uint8_t* out) = nullptr;
  size_t (*packed_a8_row_bytes)(int64_t cols) = nullptr;
  // The same for the Q4_K tile's activations: from one A8K row (quantize_a8k's output).
  void (*pack_a8k)(const uint8_t* a8k_row, int64_t cols, uint8_t* out) = nullptr;
  size_t (*packed_a8k_row_bytes)(int64_t cols) = nullptr;
};

const MatMulKernels& ScalarKernels();
// The table of `isa`; only call it for an ISA in AvailableIsas() (the per-ISA tables exist only in
// builds for their architecture; for any other ISA this returns the scalar table). For avx512, the
// variant of ActiveAvx512Tiles(): "avx512" (ymm Q4_K tile) or "avx512zmm".
const MatMulKernels& KernelsFor(Isa isa);
// Every table of every ISA in AvailableIsas(), scalar first, both avx512 variants (for tests and
// benchmarks). Each table's name starts with its ISA's name.
std::vector<const MatMulKernels*> AvailableKernels();
// The table used by WeightMatrix::MatMul: KernelsFor(ActiveIsa()).
const MatMulKernels& ActiveKernels();

namespace quant_internal {
// The Q8_0 activation layout of the AVX2 tile, which folds two pairs of blocks
// (MatMulKernels::pack_a8): per group of four A8 blocks, their scales in the lane order of the
// folded sums (d0 d0 d2 d2 d1 d1 d3 d3) and their 128 bytes as four 32-byte vectors, each holding
// the same half of two blocks: (b0 0:16 | b1 0:16), (b0 16:32 | b1 16:32), (b2 0:16 | b3 0:16), (b2
// 16:32 | b3 16:32). A missing last block is a zero block with scale 0. Plain baseline code
// (quant_kernels.cc), reached through the tables' pointers.
struct A8PairHalves {
  float d[8];
  int8_t qs[128];
};
static_assert(sizeof(A8PairHalves) == 160, "A8PairHalves must be 160 bytes");
size_t PackedA8PairHalvesRowBytes(int64_t cols);
void PackA8PairHalves(const uint8_t* a8_row, int64_t cols, uint8_t* out);

// The Q8_0 activations of the tiles over weights in eight-block groups (WeightLayout::kQ8Groups,
// quant.h; the avx512, avxvnni and neondot tables' MatMulKernels::pack_a8): per group of eight A8
// blocks, their 256 values in the weights' lane order (value 4s + j of block k at byte s*32 + k*4 +
// j, signed), the eight scales, and each block's start -128 * sum(q). The weights are stored q +
// 128 (unsigned, as vpdpbusd takes them), so vpdpbusd from that start over the group leaves sum(w
// * a) in lane k, exactly (the sdot tile flips the weights back and ignores the start). Blocks past
// the row's end are zero with scale 0. Five cache lines per group. Plain baseline code
// (quant_kernels.cc), reached through the tables' pointers.
struct alignas(64) A8Group {
  int8_t qs[256];
  float d[8];
  int32_t start[8];
};
static_assert(sizeof(A8Group) == 320, "A8Group must be 320 bytes (five cache lines)");
size_t PackedA8GroupRowBytes(int64_t cols);
void PackA8Groups(const uint8_t* a8_row, int64_t cols, uint8_t* out);

// The per-ISA tables, defined in the ISA's own files (quant_kernels_<isa>.cc) and reached only
// through KernelsFor.
const MatMulKernels& Avx2Kernels();
// The avxvnni table in VEX encoding (AVX-VNNI CPUs) and in EVEX encoding (AVX-512 VNNI CPUs); one
// source, vnni_ymm_tiles.h.
const MatMulKernels& AvxVnniKernels();
const MatMulKernels& AvxVnniEvexKernels();
const MatMulKernels& Avx512Kernels();
const MatMulKernels& Avx512ZmmKernels();  // the avx512 table with the two-block zmm Q4_K tile
const MatMulKernels& NeonKernels();
const MatMulKernels& NeonDotKernels();
}  // namespace quant_internal

}  // namespace phi4mm
