// Block-quantized storage formats for weights and activations, and their scalar reference code.
// A quantized matrix [rows, cols] stores every row as ceil(cols / block) blocks along the columns;
// the last block of a row is zero-padded when cols is not a multiple of the block size (the vision
// MLP's 4304 columns, the tiny fixtures' 48), so kernels never see a partial block. Weights:
//   Q8_0  32 int8 + one f16 scale, 34 B per 32 (8.5 bits per weight). Symmetric, value = d * q.
//   Q4_K  256 weights in 8 sub-blocks of 32: f16 d and dmin, 8-bit sub-scales and sub-mins, and
//         unsigned nibbles, 148 B per 256 (4.625 bpw). value = d * sc[j] * q - dmin * mn[j].
//         Inside a block the weights are interleaved by sub-block (Q4KPos): weight k of sub-block
//         j sits at position (k/4)*32 + j*4 + k%4, so every 32 consecutive positions hold 4
//         consecutive weights of each of the 8 sub-blocks, and 32-bit lane j of a 32-byte vector
//         belongs to sub-block j (maddubs + madd, or vpdpbusd, leave one sub-block per int32 lane).
// Activations are quantized on the fly to match: A8 (32 int8 + f32 scale) for Q8_0 weights and
// A8K (256 int8 + f32 scale + 8 sub-block sums) for Q4_K weights, with qs in the same interleaved
// order, so the unsigned Q4_K nibbles feed `maddubs` / `vpdpbusd` directly and the min term is
// applied once per sub-block from the sums.
// Quantization is deterministic. Q8_0 rounds to nearest with its scale rounded up (never down), so
// the error of every weight is at most half a step. Q4_K searches each sub-block's step and offset
// for the least squared error (which may clip outliers), stores them to nearest, and
// gives each weight the level nearest to it; the tests check both.
#pragma once

#include <cstddef>
#include <cstdint>

namespace phi4mm {

inline constexpr int kQ8Block = 32;
inline constexpr int kQ4KBlock = 256;
inline constexpr int kQ4KSub = 32;

// Position inside a Q4_K / A8K block of weight k (0..31) of sub-block j (0..7).
constexpr int Q4KPos(int j, int k) { return (k / 4) * 32 + j * 4 + k % 4; }

struct BlockQ8_0 {
  uint16_t d;     // f16 scale
  int8_t qs[32];  // -127..127
};
static_assert(sizeof(BlockQ8_0) == 34, "BlockQ8_0 must be 34 bytes");

struct BlockQ4K {
  uint16_t d;          // f16 scale of the sub-scales
  uint16_t dmin;       // f16 scale of the sub-mins
  uint8_t scales[8];   // sub-block j step = d * scales[j]
  uint8_t mins[8];     // sub-block j offset = dmin * mins[j] (subtracted)
  uint8_t qs[128];     // 64-position chunk c: byte c*32+i holds position c*64+i (low nibble) and
                       // c*64+32+i (high nibble); positions are Q4KPos(sub-block, weight)
};
static_assert(sizeof(BlockQ4K) == 148, "BlockQ4K must be 148 bytes");

// The 4-bit value stored at position p (0..255) of a Q4_K block.
inline int Q4KNibble(const BlockQ4K& b, int p) {
  const uint8_t byte = b.qs[(p / 64) * 32 + p % 32];
  return p % 64 < 32 ? (byte & 15) : (byte >> 4);
}

struct BlockA8 {
  float d;
  int8_t qs[32];
};
static_assert(sizeof(BlockA8) == 36, "BlockA8 must be 36 bytes");

struct BlockA8K {
  float d;
  int16_t bsums[8];  // sum of qs over each 32-element sub-block
  int8_t qs[256];    // element k of sub-block j at Q4KPos(j, k), as in BlockQ4K
};
static_assert(sizeof(BlockA8K) == 276, "BlockA8K must be 276 bytes");

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Bytes of one quantized row of `cols` values.
inline size_t Q8RowBytes(int64_t cols) { return static_cast<size_t>(CeilDiv(cols, kQ8Block)) * sizeof(BlockQ8_0); }
inline size_t Q4KRowBytes(int64_t cols) { return static_cast<size_t>(CeilDiv(cols, kQ4KBlock)) * sizeof(BlockQ4K); }
inline size_t A8RowBytes(int64_t cols) { return static_cast<size_t>(CeilDiv(cols, kQ8Block)) * sizeof(BlockA8); }
inline size_t A8KRowBytes(int64_t cols) { return static_cast<size_t>(CeilDiv(cols, kQ4KBlock)) * sizeof(BlockA8K); }

// Q8_0 rows in eight-block groups (WeightLayout::kQ8Groups, the compute layout of the avx512,
// avxvnni and neondot tables' Q8_0 tiles; a matrix is repacked to it at load, the files keep plain
// Q8_0 rows). A row of nb blocks takes the same nb * 34 bytes as a plain one: first the values
// (32 * nb bytes) in groups of eight blocks, then the nb f16 scales in block order. Group g holds
// blocks 8g .. 8g + m - 1, m = min(8, nb - 8g) (only the last group may be narrower), at bytes
// g * 256 .. + 32m: value 4s + j of its block k at g * 256 + s * 4m + k * 4 + j, with its sign bit
// flipped (q ^ 0x80 = q + 128, unsigned, as vpdpbusd takes it). So in a full group, 32-bit lane k
// of each 32-byte vector belongs to block k and eight vpdpbusd leave the eight block sums in the
// eight lanes; the last group's vectors are 4m bytes (each tile says how it loads them).
inline constexpr int kQ8Group = 8;
void PackQ8GroupsRow(const BlockQ8_0* in, int64_t cols, uint8_t* out);
void UnpackQ8GroupsRow(const uint8_t* in, int64_t cols, BlockQ8_0* out);

// Weight rows: x[cols] -> blocks, and back (out[cols]).
void QuantizeRowQ8_0(const float* x, int64_t cols, BlockQ8_0* out);
void DequantizeRowQ8_0(const BlockQ8_0* in, int64_t cols, float* out);
void QuantizeRowQ4K(const float* x, int64_t cols, BlockQ4K* out);
void DequantizeRowQ4K(const BlockQ4K* in, int64_t cols, float* out);

// Activation rows (reference; the kernel tables carry the per-ISA versions, bit-identical).
void QuantizeRowA8(const float* x, int64_t cols, BlockA8* out);
void QuantizeRowA8K(const float* x, int64_t cols, BlockA8K* out);

}  // namespace phi4mm
