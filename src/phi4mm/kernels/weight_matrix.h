// A 2-D weight matrix W[rows=out_features, cols=in_features] in one of several storage formats,
// and the products the models need: y = x·Wᵀ for a batch of activation rows, and row lookup
// (embeddings). Storage is either a zero-copy view into a memory-mapped checkpoint (f32, bf16,
// f16) or an owned buffer (converted or block-quantized at load: Q8_0, Q4_K, see quant.h). The
// products run on the kernel table chosen for this CPU (quant_kernels.h); the block formats
// quantize the activations to int8 blocks on the fly. A block format's rows may sit in the compute
// layout of a kernel table (WeightLayout, repacked at load) instead of the file's. Immutable after
// construction; copies share the storage; safe to use from several threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "phi4mm/base/dtype.h"
#include "phi4mm/base/status.h"
#include "phi4mm/base/thread_pool.h"
#include "phi4mm/kernels/quant_kernels.h"

namespace phi4mm {

// What the model loaders convert weights to (LoadOptions::quant).
//   kNone: as stored in the checkpoint (f32/bf16/f16 views, computed in f32)
//   kBF16: bf16 everywhere
//   kQ8:   Q8_0 linear layers and Q8_0 embedding / lm_head
//   kQ4:   Q4_K linear layers and Q8_0 embedding / lm_head (a 4-bit head hurts this model)
//   kQ4M:  kQ4 with the decoder projections that quantization error hurts most kept at Q8_0 (the
//          per-projection choice is models/tensor_manifest.h's DecoderLinearFormat)
enum class QuantMode { kNone, kBF16, kQ8, kQ4, kQ4M };
const char* QuantModeName(QuantMode m);
// Accepts "none"/"f32", "bf16", "q8", "q4", "q4m".
std::optional<QuantMode> ParseQuantMode(std::string_view s);
// The format for linear layers / for the embedding table under `m`; nullopt keeps the stored one.
// LinearFormat(kQ4M) is the format of its 4-bit projections.
std::optional<WeightFormat> LinearFormat(QuantMode m);
std::optional<WeightFormat> EmbeddingFormat(QuantMode m);

class WeightMatrix {
 public:
  WeightMatrix() = default;
  // A view of `data` (which must outlive the matrix) in the checkpoint's dtype (F32, BF16, F16).
  // Unaligned data is copied into an owned buffer.
  static Result<WeightMatrix> FromData(DType dtype, const void* data, int64_t rows, int64_t cols);
  static WeightMatrix FromF32(std::vector<float> values, int64_t rows, int64_t cols);
  // A view of `nbytes` of rows already in `format`'s storage in `layout` — what data()/bytes() of a
  // matrix in that format and layout hold (a pre-quantized checkpoint: kRows). Fails when nbytes
  // does not match or the layout is not one of the format's.
  static Result<WeightMatrix> FromStorage(WeightFormat format, const void* data, size_t nbytes, int64_t rows,
                                          int64_t cols, WeightLayout layout = WeightLayout::kRows);

  // A copy in `target` format (owned storage); the same matrix when it already is. Block formats
  // are quantized round-to-nearest from the values Row() gives. Rows are split over `pool`.
  Result<WeightMatrix> Quantize(WeightFormat target, ThreadPool* pool = nullptr) const;
  // Quantize(*target) when `target` is set, else this matrix.
  Result<WeightMatrix> ConvertedTo(std::optional<WeightFormat> target, ThreadPool* pool = nullptr) const;
  // The same values with rows in `layout` (an owned copy; this matrix when it already is): what a
  // kernel table's tile reads (MatMulKernels::layout). kRows is every format's; kQ8Groups is
  // Q8_0's only (InvalidArgument for another format). Quantize always writes kRows. With
  // `release_source` (this matrix is a view of a read-only file mapping that nothing reads again),
  // each slice of rows is dropped from the resident set once repacked, so a repack at load never
  // holds both copies of a large matrix.
  Result<WeightMatrix> WithLayout(WeightLayout layout, ThreadPool* pool = nullptr, bool release_source = false) const;
  // WithLayout(k.layout[format()]): the matrix `k`'s tile reads without repacking per call.
  Result<WeightMatrix> ForKernels(const MatMulKernels& k, ThreadPool* pool = nullptr) const;

  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  WeightFormat format() const { return format_; }
  WeightLayout layout() const { return layout_; }
  size_t bytes() const { return row_bytes_ * static_cast<size_t>(rows_); }
  size_t row_bytes() const { return row_bytes_; }
  const uint8_t* data() const { return static_cast<const uint8_t*>(data_); }
  bool empty() const { return rows_ == 0; }

  // y[n, rows] (+)= x[n, cols] · Wᵀ. Threads split the output rows.
  void MatMul(const float* x, int64_t n, float* y, ThreadPool* pool, bool accumulate = false) const;
  // The same with an explicit kernel table (tests and benchmarks compare the tables). When the
  // table's tile reads another layout than this matrix's, the call repacks a temporary copy first
  // (correct, but a copy of the matrix per call: hot paths hold ForKernels matrices).
  void MatMulWith(const MatMulKernels& k, const float* x, int64_t n, float* y, ThreadPool* pool,
                  bool accumulate = false) const;
  // out[cols] = W[r, :] as float (dequantized for the block formats).
  void Row(int64_t r, float* out) const;

 private:
  static size_t RowBytesOf(WeightFormat f, int64_t cols);

  WeightFormat format_ = WeightFormat::kF32;
  WeightLayout layout_ = WeightLayout::kRows;
  int64_t rows_ = 0, cols_ = 0;
  size_t row_bytes_ = 0;
  const void* data_ = nullptr;
  // Points at `data` when it is `alignment`-aligned, else at an owned copy of bytes() of it.
  void ViewOrCopy(const void* data, size_t alignment);

  std::shared_ptr<uint8_t[]> owned_;
};

// Dot product of two float vectors (8 independent accumulators; vectorises without fast-math).
float DotF32(const float* a, const float* b, int64_t n);

}  // namespace phi4mm
