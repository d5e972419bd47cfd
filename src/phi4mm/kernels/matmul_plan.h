// One product y[n, rows] (+)= x[n, cols]·Wᵀ prepared to run in pieces: the activations are
// quantized (block formats) into a caller's buffer when the plan is made, and RunRows computes any
// range of output rows with the tile shape n calls for (GEMV, small batch or GEMM tiles, as
// WeightMatrix::MatMul picks them). A caller can so run several products inside one ParallelFor:
// LoraLinear runs a projection's low-rank A passes in one loop and its base product with the B
// passes in another, instead of one pool hand-off (and one split of a small matrix over the
// threads) per pass. WeightMatrix::MatMul itself is a plan run over the pool. Every output row is
// reduced in the same order whichever range it falls in, so how rows are split never changes a
// result.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "phi4mm/base/thread_pool.h"
#include "phi4mm/kernels/quant_kernels.h"
#include "phi4mm/kernels/weight_matrix.h"

namespace phi4mm {

class MatMulPlan {
 public:
  // `x` [n, cols] is read here (quantized into `buffer`, which is resized as needed and must stay
  // untouched until the last RunRows); `y` [n, rows] is written by RunRows. When `w` is not in the
  // layout k's tile reads, the plan holds a repacked copy (tests and benchmarks comparing tables;
  // model weights are loaded in the active table's layout). `pool` splits the quantization of a
  // prefill chunk's many rows.
  // Row i of x starts at x + i * ldx (ldx 0: cols, the rows packed).
  MatMulPlan(const WeightMatrix& w, const MatMulKernels& k, const float* x, int64_t n, float* y, bool accumulate,
             std::vector<uint8_t>* buffer, ThreadPool* pool = nullptr, int64_t ldx = 0);

  int64_t rows() const { return w_->rows(); }
  // Output rows per weight tile: the unit a parallel loop should split rows in.
  int64_t tile_rows() const { return R_; }
  // Tiles per thread worth a pool hand-off (~64k multiply-adds).
  int64_t grain() const;
  // Output rows [r_begin, r_end) of all n activation rows (the range is clipped to rows()).
  void RunRows(int64_t r_begin, int64_t r_end) const;

 private:
  std::optional<WeightMatrix> repacked_;
  const WeightMatrix* w_ = nullptr;
  TileFn tile_ = nullptr;
  int64_t n_ = 0, R_ = 1, N_ = 1;
  const uint8_t* a_ = nullptr;
  size_t a_stride_ = 0;
  float* y_ = nullptr;
  bool accumulate_ = false;
};

}  // namespace phi4mm
