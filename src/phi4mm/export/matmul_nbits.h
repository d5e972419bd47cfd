// Weights for ONNX Runtime's MatMulNBits (com.microsoft): a [N, K] matrix (the checkpoint's
// [out, in] linear layout, y = x·Wᵀ) cut into blocks of `block` values along K, each block stored as
// unsigned `bits`-bit integers q with one float scale s, w ≈ (q − 2^(bits−1))·s (symmetric: no
// zero-point tensor, MatMulNBits' default zero point 2^(bits−1)). The rounding is that of ORT's own
// quantizer (quantize_matmul_4bits / quantize_matmul_8bits, MLAS's blockwise quantizer): per block
// m = the value of largest magnitude (sign kept, the last-scanned one when min and max tie),
// s = −m / 2^(bits−1), q = clamp(roundf(w·(1/s) + 2^(bits−1)), 0, 2^bits − 1) with roundf rounding
// halves away from zero; so the export's packed bytes equal what ORT writes, bit for bit
// (tools/onnx/check_export.py checks it against the installed onnxruntime). Packing: B is
// [N, ceil(K/block), block·bits/8] bytes, 4-bit pairs with the even k in the low nibble; the
// padding past K in the last block is zero bytes, as ORT's quantizer leaves a zeroed buffer.
#pragma once

#include <cstdint>
#include <vector>

namespace phi4mm::exporter {

struct NBitsMatrix {
  int64_t n = 0, k = 0;
  int bits = 4, block = 32;
  std::vector<uint8_t> packed;  // [n, k_blocks, block·bits/8]
  std::vector<float> scales;    // [n, k_blocks]
  int64_t k_blocks() const { return (k + block - 1) / block; }
};

// `w` is [n, k] row-major; bits is 4 or 8, block a power of two ≥ 16.
NBitsMatrix QuantizeNBits(const float* w, int64_t n, int64_t k, int bits, int block = 32);

// Element (row, col) of the dequantized matrix, (q − 2^(bits−1))·s.
float DequantizeNBits(const NBitsMatrix& m, int64_t row, int64_t col);

}  // namespace phi4mm::exporter
