// WeightMatrix storage, conversion between formats, and the matmul driver: activation rows are
// quantized once per call (block formats), output rows are split over the pool in whole tiles,
// and each thread walks its rows in tiles of R weight rows x N activation rows, in chunks of
// activation rows small enough to stay in L2 while the weight rows stream past once per chunk.
// Owned buffers (converted or quantized weights) of 2 MiB and more sit on transparent huge pages.
#include "phi4mm/kernels/weight_matrix.h"

#include <algorithm>
#include <cstring>

#include "phi4mm/base/file_map.h"
#include "phi4mm/base/half.h"
#include "phi4mm/base/huge_pages.h"
#include "phi4mm/kernels/quant.h"

namespace phi4mm {

const char* QuantModeName(QuantMode m) {
  switch (m) {
    case QuantMode::kNone: return "none";
    case QuantMode::kBF16: return "bf16";
    case QuantMode::kQ8: return "q8";
    case QuantMode::kQ4: return "q4";
    case QuantMode::kQ4M: return "q4m";
  }
  return "?";
}

std::optional<QuantMode> ParseQuantMode(std::string_view s) {
  if (s == "none" || s == "f32") return QuantMode::kNone;
  if (s == "bf16") return QuantMode::kBF16;
  if (s == "q8") return QuantMode::kQ8;
  if (s == "q4") return QuantMode::kQ4;
  if (s == "q4m") return QuantMode::kQ4M;
  return std::nullopt;
}

std::optional<WeightFormat> LinearFormat(QuantMode m) {
  switch (m) {
    case QuantMode::kNone: return std::nullopt;
    case QuantMode::kBF16: return WeightFormat::kBF16;
    case QuantMode::kQ8: return WeightFormat::kQ8_0;
    case QuantMode::kQ4:
    case QuantMode::kQ4M: return WeightFormat::kQ4K;
  }
  return std::nullopt;
}

std::optional<WeightFormat> EmbeddingFormat(QuantMode m) {
  if (m == QuantMode::kQ4 || m == QuantMode::kQ4M) return WeightFormat::kQ8_0;
  return LinearFormat(m);
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

namespace {

// A matrix in `format` can sit in `layout`: kRows always, kQ8Groups for Q8_0 only.
Status CheckLayout(WeightFormat format, WeightLayout layout) {
  if (layout == WeightLayout::kQ8Groups && format != WeightFormat::kQ8_0)
    return InvalidArgument(std::string("the ") + WeightLayoutName(layout) + " layout holds q8_0 rows, not " +
                           WeightFormatName(format));
  return Status::Ok();
}

}  // namespace

size_t WeightMatrix::RowBytesOf(WeightFormat f, int64_t cols) {
  switch (f) {
    case WeightFormat::kF32: return static_cast<size_t>(cols) * 4;
    case WeightFormat::kBF16:
    case WeightFormat::kF16: return static_cast<size_t>(cols) * 2;
    case WeightFormat::kQ8_0: return Q8RowBytes(cols);
    case WeightFormat::kQ4K: return Q4KRowBytes(cols);
  }
  return 0;
}

Result<WeightMatrix> WeightMatrix::FromData(DType dtype, const void* data, int64_t rows, int64_t cols) {
  WeightMatrix w;
  w.rows_ = rows;
  w.cols_ = cols;
  switch (dtype) {
    case DType::kF32: w.format_ = WeightFormat::kF32; break;
    case DType::kBF16: w.format_ = WeightFormat::kBF16; break;
    case DType::kF16: w.format_ = WeightFormat::kF16; break;
    default:
      return Unsupported(std::string("weights stored as ") + DTypeName(dtype) +
                         " are not supported (expected F32, BF16 or F16)");
  }
  w.row_bytes_ = RowBytesOf(w.format_, cols);
  w.ViewOrCopy(data, DTypeSize(dtype));
  return w;
}

Result<WeightMatrix> WeightMatrix::FromStorage(WeightFormat format, const void* data, size_t nbytes, int64_t rows,
                                               int64_t cols, WeightLayout layout) {
  PHI4MM_RETURN_IF_ERROR(CheckLayout(format, layout));
  WeightMatrix w;
  w.format_ = format;
  w.layout_ = layout;
  w.rows_ = rows;
  w.cols_ = cols;
  w.row_bytes_ = RowBytesOf(format, cols);
  if (rows < 0 || cols < 0 || nbytes != w.bytes())
    return InvalidArgument(std::string(WeightFormatName(format)) + " storage of " + std::to_string(rows) + "x" +
                           std::to_string(cols) + " needs " + std::to_string(w.bytes()) + " bytes, got " +
                           std::to_string(nbytes));
  w.ViewOrCopy(data, alignof(uint32_t));
  return w;
}

void WeightMatrix::ViewOrCopy(const void* data, size_t alignment) {
  if (reinterpret_cast<uintptr_t>(data) % alignment == 0) {
    data_ = data;
    return;
  }
  owned_ = AllocateHugeAligned(bytes());
  std::memcpy(owned_.get(), data, bytes());
  data_ = owned_.get();
}

WeightMatrix WeightMatrix::FromF32(std::vector<float> values, int64_t rows, int64_t cols) {
  WeightMatrix w;
  w.rows_ = rows;
  w.cols_ = cols;
  w.format_ = WeightFormat::kF32;
  w.row_bytes_ = RowBytesOf(w.format_, cols);
  w.owned_ = AllocateHugeAligned(values.size() * sizeof(float));
  std::memcpy(w.owned_.get(), values.data(), values.size() * sizeof(float));
  w.data_ = w.owned_.get();
  return w;
}

Result<WeightMatrix> WeightMatrix::Quantize(WeightFormat target, ThreadPool* pool) const {
  if (target == format_) return *this;
  WeightMatrix q;
  q.format_ = target;
  q.rows_ = rows_;
  q.cols_ = cols_;
  q.row_bytes_ = RowBytesOf(target, cols_);
  q.owned_ = AllocateHugeAligned(q.bytes());
  q.data_ = q.owned_.get();
  uint8_t* dst = q.owned_.get();
  auto body = [&](int64_t b, int64_t e) {
    std::vector<float> row(static_cast<size_t>(cols_));
    for (int64_t r = b; r < e; ++r) {
      Row(r, row.data());
      uint8_t* out = dst + static_cast<size_t>(r) * q.row_bytes_;
      switch (target) {
        case WeightFormat::kF32: std::memcpy(out, row.data(), q.row_bytes_); break;
        case WeightFormat::kBF16:
          for (int64_t k = 0; k < cols_; ++k) {
            const uint16_t h = F32ToBf16(row[k]);
            std::memcpy(out + 2 * k, &h, 2);
          }
          break;
        case WeightFormat::kF16:
          for (int64_t k = 0; k < cols_; ++k) {
            const uint16_t h = F32ToF16(row[k]);
            std::memcpy(out + 2 * k, &h, 2);
          }
          break;
        case WeightFormat::kQ8_0: QuantizeRowQ8_0(row.data(), cols_, reinterpret_cast<BlockQ8_0*>(out)); break;
        case WeightFormat::kQ4K: QuantizeRowQ4K(row.data(), cols_, reinterpret_cast<BlockQ4K*>(out)); break;
      }
    }
  };
  if (pool != nullptr) pool->ParallelFor(rows_, body, 64);
  else body(0, rows_);
  return q;
}

Result<WeightMatrix> WeightMatrix::ConvertedTo(std::optional<WeightFormat> target, ThreadPool* pool) const {
  if (!target) return *this;
  return Quantize(*target, pool);
}

Result<WeightMatrix> WeightMatrix::WithLayout(WeightLayout layout, ThreadPool* pool, bool release_source) const {
  if (layout == layout_) return *this;
  PHI4MM_RETURN_IF_ERROR(CheckLayout(format_, layout));
  WeightMatrix m = *this;
  m.layout_ = layout;
  m.owned_ = AllocateHugeAligned(m.bytes());
  m.data_ = m.owned_.get();
  uint8_t* dst = m.owned_.get();
  // Slices of ~1 MiB of rows, each released (when asked) as soon as it is repacked.
  const int64_t slice = std::max<int64_t>(1, (int64_t{1} << 20) / static_cast<int64_t>(row_bytes_));
  auto body = [&](int64_t b, int64_t e) {
    for (int64_t r0 = b; r0 < e; r0 += slice) {
      const int64_t r1 = std::min(e, r0 + slice);
      for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* in = data() + static_cast<size_t>(r) * row_bytes_;
        uint8_t* out = dst + static_cast<size_t>(r) * row_bytes_;
        if (layout == WeightLayout::kQ8Groups) PackQ8GroupsRow(reinterpret_cast<const BlockQ8_0*>(in), cols_, out);
        else UnpackQ8GroupsRow(in, cols_, reinterpret_cast<BlockQ8_0*>(out));
      }
      if (release_source)
        AdviseUnneeded(data() + static_cast<size_t>(r0) * row_bytes_, static_cast<size_t>(r1 - r0) * row_bytes_);
    }
  };
  if (pool != nullptr) pool->ParallelFor(rows_, body, slice);
  else body(0, rows_);
  return m;
}

Result<WeightMatrix> WeightMatrix::ForKernels(const MatMulKernels& k, ThreadPool* pool) const {
  return WithLayout(k.layout[static_cast<int>(format_)], pool);
}

void WeightMatrix::Row(int64_t r, float* out) const {
  const uint8_t* p = data() + static_cast<size_t>(r) * row_bytes_;
  if (layout_ == WeightLayout::kQ8Groups) {
    std::vector<BlockQ8_0> blocks(static_cast<size_t>(CeilDiv(cols_, kQ8Block)));
    UnpackQ8GroupsRow(p, cols_, blocks.data());
    DequantizeRowQ8_0(blocks.data(), cols_, out);
    return;
  }
  switch (format_) {
    case WeightFormat::kF32: std::memcpy(out, p, static_cast<size_t>(cols_) * sizeof(float)); break;
    case WeightFormat::kBF16:
      for (int64_t i = 0; i < cols_; ++i) out[i] = Bf16ToF32(reinterpret_cast<const uint16_t*>(p)[i]);
      break;
    case WeightFormat::kF16:
      for (int64_t i = 0; i < cols_; ++i) out[i] = F16ToF32(reinterpret_cast<const uint16_t*>(p)[i]);
      break;
    case WeightFormat::kQ8_0: DequantizeRowQ8_0(reinterpret_cast<const BlockQ8_0*>(p), cols_, out); break;
    case WeightFormat::kQ4K: DequantizeRowQ4K(reinterpret_cast<const BlockQ4K*>(p), cols_, out); break;
  }
}

void WeightMatrix::MatMul(const float* x, int64_t n, float* y, ThreadPool* pool, bool accumulate) const {
  MatMulWith(ActiveKernels(), x, n, y, pool, accumulate);
}

void WeightMatrix::MatMulWith(const MatMulKernels& k, const float* x, int64_t n, float* y, ThreadPool* pool,
                              bool accumulate) const {
  if (rows_ == 0 || n == 0) return;
  const int fi = static_cast<int>(format_);
  if (k.layout[fi] != layout_) {
    // A table whose tile reads another layout (tests and benchmarks comparing tables): repack a
    // copy for this call. Model weights are loaded in the active table's layout (ForKernels).
    // (It cannot fail: a table names another layout than kRows only for a format that has it.)
    auto m = WithLayout(k.layout[fi], pool);
    if (m.ok()) m->MatMulWith(k, x, n, y, pool, accumulate);
    return;
  }
  const TileFn tile = k.tile[fi];
  const TileShape shape = k.shape[fi];
  // A batched decode step's few rows all meet each weight tile in one pass (the batch shape); a
  // prefill chunk walks them in GEMM tiles.
  const bool batch = n > 1 && n <= kSmallBatch;
  const int64_t R = n == 1 ? shape.gemv_r : batch ? shape.batch_r : shape.gemm_r;
  const int64_t N = n == 1 ? 1 : batch ? shape.batch_n : shape.gemm_n;

  // Activations: float rows as given, or int8 blocks quantized here once for all threads.
  // The buffer is per calling thread; workers only read it while this call waits for them.
  // A table whose Q8_0 or Q4_K tile has its own activation layout (pack_a8, pack_a8k) gets each
  // quantized row repacked into `packed`.
  thread_local std::vector<uint8_t> act, packed;
  const uint8_t* a = reinterpret_cast<const uint8_t*>(x);
  size_t a_stride = static_cast<size_t>(cols_) * sizeof(float);
  if (IsBlockFormat(format_)) {
    const bool q4 = format_ == WeightFormat::kQ4K;
    a_stride = q4 ? A8KRowBytes(cols_) : A8RowBytes(cols_);
    const QuantizeRowFn quantize = q4 ? k.quantize_a8k : k.quantize_a8;
    const auto pack_fn = q4 ? k.pack_a8k : k.pack_a8;
    const bool pack = pack_fn != nullptr;
    const size_t p_stride = pack ? (q4 ? k.packed_a8k_row_bytes : k.packed_a8_row_bytes)(cols_) : 0;
    if (act.size() < static_cast<size_t>(n) * a_stride) act.resize(static_cast<size_t>(n) * a_stride);
    // The packed buffer starts on a cache line (the AVX-512 layouts are whole lines per row).
    if (packed.size() < static_cast<size_t>(n) * p_stride + 64) packed.resize(static_cast<size_t>(n) * p_stride + 64);
    uint8_t* buf = act.data();
    uint8_t* pbuf = packed.data() + (64 - reinterpret_cast<uintptr_t>(packed.data()) % 64) % 64;
    auto quant = [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        quantize(x + i * cols_, cols_, buf + i * a_stride);
        if (pack) pack_fn(buf + i * a_stride, cols_, pbuf + i * p_stride);
      }
    };
    if (pool != nullptr && n >= 32) pool->ParallelFor(n, quant, 16);
    else quant(0, n);
    a = pack ? pbuf : buf;
    if (pack) a_stride = p_stride;
  }

  // Activation rows per chunk: ~200 KB of int8 blocks or ~400 KB of floats at the decoder's widths.
  const int64_t chunk = IsBlockFormat(format_) ? 64 : 32;
  const int64_t groups = CeilDiv(rows_, R);
  auto body = [&](int64_t g0, int64_t g1) {
    const int64_t r_begin = g0 * R, r_end = std::min(rows_, g1 * R);
    TileArgs t;
    t.w_stride = row_bytes_;
    t.a_stride = a_stride;
    t.cols = cols_;
    t.ldy = rows_;
    t.accumulate = accumulate;
    for (int64_t i0 = 0; i0 < n; i0 += chunk) {
      const int64_t i1 = std::min(n, i0 + chunk);
      for (int64_t r = r_begin; r < r_end; r += R) {
        t.nr = static_cast<int>(std::min(R, r_end - r));
        t.w = data() + static_cast<size_t>(r) * row_bytes_;
        for (int64_t i = i0; i < i1; i += N) {
          t.na = static_cast<int>(std::min(N, i1 - i));
          t.prefetch = i == i0 && n <= kSmallBatch;
          t.a = a + static_cast<size_t>(i) * a_stride;
          t.y = y + i * rows_ + r;
          tile(t);
        }
      }
    }
  };
  if (pool == nullptr) {
    body(0, groups);
  } else {
    // Enough work per thread to be worth waking it: ~64k multiply-adds.
    const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(1, R * cols_ * n));
    pool->ParallelFor(groups, body, grain);
  }
}

}  // namespace phi4mm
