// A 2-D weight matrix W[rows=out_features, cols=in_features] in one of several storage formats,
// and the products the models need: y = x·Wᵀ for a batch of activation rows, and row lookup
// (embeddings). Storage is either a zero-copy view into a memory-mapped checkpoint or an owned
// buffer. New formats (8-bit and 4-bit blocks) plug in here without changing model code.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "phi4mm/base/dtype.h"
#include "phi4mm/base/status.h"
#include "phi4mm/base/thread_pool.h"

namespace phi4mm {

enum class WeightFormat { kF32, kBF16, kF16 };
const char* WeightFormatName(WeightFormat f);

class WeightMatrix {
 public:
  WeightMatrix() = default;
  // A view of `data` (which must outlive the matrix) in the checkpoint's dtype (F32, BF16, F16).
  // Unaligned or unsupported-dtype data is copied/converted into an owned buffer.
  static Result<WeightMatrix> FromData(DType dtype, const void* data, int64_t rows, int64_t cols);
  static WeightMatrix FromF32(std::vector<float> values, int64_t rows, int64_t cols);

  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  WeightFormat format() const { return format_; }
  size_t bytes() const;
  bool empty() const { return rows_ == 0; }

  // y[n, rows] (+)= x[n, cols] · Wᵀ. Threads split the output rows.
  void MatMul(const float* x, int64_t n, float* y, ThreadPool* pool, bool accumulate = false) const;
  // out[cols] = W[r, :] as float.
  void Row(int64_t r, float* out) const;

 private:
  void RowsTimesBatch(int64_t r0, int64_t r1, const float* x, int64_t n, float* y, bool accumulate) const;

  WeightFormat format_ = WeightFormat::kF32;
  int64_t rows_ = 0, cols_ = 0;
  const void* data_ = nullptr;
  std::shared_ptr<std::vector<uint8_t>> owned_;
};

// Dot product of two float vectors (8 independent accumulators; vectorises without fast-math).
float DotF32(const float* a, const float* b, int64_t n);

}  // namespace phi4mm
