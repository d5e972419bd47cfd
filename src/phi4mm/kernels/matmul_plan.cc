// MatMulPlan: activation quantization at construction, then tiles of R weight rows x N activation
// rows over a range of output rows, in chunks of activation rows small enough to stay in L2 while
// the weight rows stream past once per chunk.
#include "phi4mm/kernels/matmul_plan.h"

#include <algorithm>

#include "phi4mm/kernels/quant.h"

namespace phi4mm {

MatMulPlan::MatMulPlan(const WeightMatrix& w, const MatMulKernels& k, const float* x, int64_t n, float* y,
                       bool accumulate, std::vector<uint8_t>* buffer, ThreadPool* pool, int64_t ldx)
    : w_(&w), n_(n), y_(y), accumulate_(accumulate) {
  const int fi = static_cast<int>(w.format());
  if (k.layout[fi] != w.layout()) {
    // It cannot fail: a table names another layout than kRows only for a format that has it.
    auto m = w.WithLayout(k.layout[fi], pool);
    if (m.ok()) {
      repacked_ = std::move(*m);
      w_ = &*repacked_;
    }
  }
  tile_ = k.tile[fi];
  const TileShape shape = k.shape[fi];
  // A batched decode step's few rows all meet each weight tile in one pass (the batch shape); a
  // prefill chunk walks them in GEMM tiles.
  const bool batch = n > 1 && n <= kSmallBatch;
  R_ = n == 1 ? shape.gemv_r : batch ? shape.batch_r : shape.gemm_r;
  N_ = n == 1 ? 1 : batch ? shape.batch_n : shape.gemm_n;

  // Activations: float rows as given, or int8 blocks quantized here once for all threads. A table
  // whose Q8_0 or Q4_K tile has its own activation layout (pack_a8, pack_a8k) gets each quantized
  // row repacked after them, on a cache line (the AVX-512 layouts are whole lines per row).
  const int64_t cols = w.cols();
  if (ldx == 0) ldx = cols;
  a_ = reinterpret_cast<const uint8_t*>(x);
  a_stride_ = static_cast<size_t>(ldx) * sizeof(float);
  if (!IsBlockFormat(w.format()) || n == 0) return;
  const bool q4 = w.format() == WeightFormat::kQ4K;
  const size_t q_stride = q4 ? A8KRowBytes(cols) : A8RowBytes(cols);
  const QuantizeRowFn quantize = q4 ? k.quantize_a8k : k.quantize_a8;
  const auto pack_fn = q4 ? k.pack_a8k : k.pack_a8;
  const size_t p_stride = pack_fn != nullptr ? (q4 ? k.packed_a8k_row_bytes : k.packed_a8_row_bytes)(cols) : 0;
  const size_t q_bytes = static_cast<size_t>(n) * q_stride;
  if (buffer->size() < q_bytes + static_cast<size_t>(n) * p_stride + 128)
    buffer->resize(q_bytes + static_cast<size_t>(n) * p_stride + 128);
  auto aligned = [&](size_t offset) {
    uint8_t* p = buffer->data() + offset;
    return p + (64 - reinterpret_cast<uintptr_t>(p) % 64) % 64;
  };
  uint8_t* qbuf = aligned(0);
  uint8_t* pbuf = aligned(static_cast<size_t>(qbuf - buffer->data()) + q_bytes);
  auto quant = [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      quantize(x + i * ldx, cols, qbuf + i * q_stride);
      if (pack_fn != nullptr) pack_fn(qbuf + i * q_stride, cols, pbuf + i * p_stride);
    }
  };
  if (pool != nullptr && n >= 32) pool->ParallelFor(n, quant, 16);
  else quant(0, n);
  a_ = pack_fn != nullptr ? pbuf : qbuf;
  a_stride_ = pack_fn != nullptr ? p_stride : q_stride;
}

int64_t MatMulPlan::grain() const { return std::max<int64_t>(1, 65536 / std::max<int64_t>(1, R_ * w_->cols() * n_)); }

void MatMulPlan::RunRows(int64_t r_begin, int64_t r_end) const {
  r_end = std::min(r_end, w_->rows());
  if (r_begin >= r_end || n_ == 0) return;
  // Activation rows per chunk: ~200 KB of int8 blocks or ~400 KB of floats at the decoder's widths.
  const int64_t chunk = IsBlockFormat(w_->format()) ? 64 : 32;
  const size_t row_bytes = w_->row_bytes();
  TileArgs t;
  t.w_stride = row_bytes;
  t.a_stride = a_stride_;
  t.cols = w_->cols();
  t.ldy = w_->rows();
  t.accumulate = accumulate_;
  for (int64_t i0 = 0; i0 < n_; i0 += chunk) {
    const int64_t i1 = std::min(n_, i0 + chunk);
    for (int64_t r = r_begin; r < r_end; r += R_) {
      t.nr = static_cast<int>(std::min(R_, r_end - r));
      t.w = w_->data() + static_cast<size_t>(r) * row_bytes;
      for (int64_t i = i0; i < i1; i += N_) {
        t.na = static_cast<int>(std::min(N_, i1 - i));
        t.prefetch = i == i0 && n_ <= kSmallBatch;
        t.a = a_ + static_cast<size_t>(i) * a_stride_;
        t.y = y_ + i * w_->rows() + r;
        tile_(t);
      }
    }
  }
}

}  // namespace phi4mm
