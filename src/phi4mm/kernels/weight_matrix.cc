// Portable reference implementation of WeightMatrix products. Rows of 16-bit formats are widened
// to float once per block of output rows and reused for every activation row of the batch.
#include "phi4mm/kernels/weight_matrix.h"

#include <algorithm>
#include <cstring>

#include "phi4mm/base/half.h"

namespace phi4mm {

const char* WeightFormatName(WeightFormat f) {
  switch (f) {
    case WeightFormat::kF32: return "f32";
    case WeightFormat::kBF16: return "bf16";
    case WeightFormat::kF16: return "f16";
  }
  return "?";
}

float DotF32(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

Result<WeightMatrix> WeightMatrix::FromData(DType dtype, const void* data, int64_t rows, int64_t cols) {
  WeightMatrix w;
  w.rows_ = rows;
  w.cols_ = cols;
  const size_t n = static_cast<size_t>(rows * cols);
  switch (dtype) {
    case DType::kF32: w.format_ = WeightFormat::kF32; break;
    case DType::kBF16: w.format_ = WeightFormat::kBF16; break;
    case DType::kF16: w.format_ = WeightFormat::kF16; break;
    default:
      return Unsupported(std::string("weights stored as ") + DTypeName(dtype) +
                         " are not supported (expected F32, BF16 or F16)");
  }
  const size_t elem = DTypeSize(dtype);
  if (reinterpret_cast<uintptr_t>(data) % elem != 0) {
    w.owned_ = std::make_shared<std::vector<uint8_t>>(n * elem);
    std::memcpy(w.owned_->data(), data, n * elem);
    w.data_ = w.owned_->data();
  } else {
    w.data_ = data;
  }
  return w;
}

WeightMatrix WeightMatrix::FromF32(std::vector<float> values, int64_t rows, int64_t cols) {
  WeightMatrix w;
  w.rows_ = rows;
  w.cols_ = cols;
  w.format_ = WeightFormat::kF32;
  w.owned_ = std::make_shared<std::vector<uint8_t>>(values.size() * sizeof(float));
  std::memcpy(w.owned_->data(), values.data(), w.owned_->size());
  w.data_ = w.owned_->data();
  return w;
}

size_t WeightMatrix::bytes() const {
  const size_t n = static_cast<size_t>(rows_ * cols_);
  return format_ == WeightFormat::kF32 ? n * 4 : n * 2;
}

void WeightMatrix::Row(int64_t r, float* out) const {
  const size_t off = static_cast<size_t>(r * cols_);
  switch (format_) {
    case WeightFormat::kF32:
      std::memcpy(out, static_cast<const float*>(data_) + off, cols_ * sizeof(float));
      break;
    case WeightFormat::kBF16: {
      const uint16_t* p = static_cast<const uint16_t*>(data_) + off;
      for (int64_t i = 0; i < cols_; ++i) out[i] = Bf16ToF32(p[i]);
      break;
    }
    case WeightFormat::kF16: {
      const uint16_t* p = static_cast<const uint16_t*>(data_) + off;
      for (int64_t i = 0; i < cols_; ++i) out[i] = F16ToF32(p[i]);
      break;
    }
  }
}

void WeightMatrix::RowsTimesBatch(int64_t r0, int64_t r1, const float* x, int64_t n, float* y,
                                  bool accumulate) const {
  constexpr int64_t kRowBlock = 4;
  std::vector<float> buf;
  if (format_ != WeightFormat::kF32) buf.resize(static_cast<size_t>(kRowBlock * cols_));
  for (int64_t rb = r0; rb < r1; rb += kRowBlock) {
    const int64_t re = std::min(r1, rb + kRowBlock);
    const float* wrows;
    if (format_ == WeightFormat::kF32) {
      wrows = static_cast<const float*>(data_) + rb * cols_;
    } else {
      for (int64_t r = rb; r < re; ++r) Row(r, buf.data() + (r - rb) * cols_);
      wrows = buf.data();
    }
    for (int64_t i = 0; i < n; ++i) {
      const float* xi = x + i * cols_;
      float* yi = y + i * rows_;
      for (int64_t r = rb; r < re; ++r) {
        const float d = DotF32(wrows + (r - rb) * cols_, xi, cols_);
        yi[r] = accumulate ? yi[r] + d : d;
      }
    }
  }
}

void WeightMatrix::MatMul(const float* x, int64_t n, float* y, ThreadPool* pool, bool accumulate) const {
  if (rows_ == 0 || n == 0) return;
  auto body = [&](int64_t b, int64_t e) { RowsTimesBatch(b, e, x, n, y, accumulate); };
  if (pool == nullptr) {
    body(0, rows_);
  } else {
    // Enough work per thread to be worth waking it: ~64k multiply-adds.
    const int64_t grain = std::max<int64_t>(4, 65536 / std::max<int64_t>(1, cols_ * n));
    pool->ParallelFor(rows_, body, grain);
  }
}

}  // namespace phi4mm
