// LoadWeight / LoadFloats: checkpoint tensor -> WeightMatrix view or converted copy.
#include "phi4mm/models/weight_loading.h"

#include "phi4mm/base/file_map.h"
#include "phi4mm/io/prequantized.h"

namespace phi4mm {

namespace {

std::optional<WeightFormat> WeightFormatFromName(const std::string& name) {
  for (int f = 0; f < kNumWeightFormats; ++f)
    if (name == WeightFormatName(static_cast<WeightFormat>(f))) return static_cast<WeightFormat>(f);
  return std::nullopt;
}

// `m` in the layout the active kernel table's tile reads (a copy when that is not the file's; the
// file's pages it was made from are then dropped). A checkpoint being converted for writing
// (`phi4mm quantize`, a ConversionLog) keeps the file's layout, which is what gets written.
Result<WeightMatrix> InKernelLayout(const Checkpoint& ckpt, WeightMatrix m, const TensorView& t, ThreadPool* pool) {
  if (ckpt.conversion_log() != nullptr) return m;
  const WeightLayout want = ActiveKernels().layout[static_cast<int>(m.format())];
  if (want == m.layout()) return m;
  const bool file_view = m.data() == t.data;
  auto repacked = m.WithLayout(want, pool, /*release_source=*/file_view);
  if (!repacked.ok()) return repacked.status();
  if (file_view) AdviseUnneeded(t.data, t.nbytes);
  return repacked;
}

// A tensor `phi4mm quantize` stored in a weight format: a view of its rows, when that is the format
// asked for, none is, or the folder is loaded in the mode it was written with (Checkpoint::load_mode).
Result<WeightMatrix> LoadPacked(const Checkpoint& ckpt, const std::string& name, const TensorView& t, int64_t rows,
                                int64_t cols, std::optional<WeightFormat> format, ThreadPool* pool) {
  const std::string what = "pre-quantized tensor '" + ckpt.SourceName(name) + "' in '" + t.file + "'";
  const std::optional<WeightFormat> stored = WeightFormatFromName(t.packed->format);
  if (!stored)
    return Unsupported(what + " is stored in format '" + t.packed->format +
                       "', which this phi4mm does not know: quantize the original checkpoint with this phi4mm");
  if (t.packed->rows != rows || t.packed->cols != cols)
    return DataLoss(what + " holds a " + std::to_string(t.packed->rows) + "x" + std::to_string(t.packed->cols) +
                    " matrix but the model needs " + std::to_string(rows) + "x" + std::to_string(cols));
  if (format && *format != *stored && ckpt.load_mode() != ckpt.prequantized()) {
    const std::string mode = ckpt.prequantized().empty() ? std::string("?") : ckpt.prequantized();
    return InvalidArgument(what + " is stored as " + WeightFormatName(*stored) + " (the folder was written by `phi4mm quantize --quant " +
                           mode + "`) but " + WeightFormatName(*format) +
                           " was requested: load it with --quant " + mode +
                           " or none (as stored), or quantize the original checkpoint with the mode you want");
  }
  auto m = WeightMatrix::FromStorage(*stored, t.data, t.nbytes, rows, cols);
  if (!m.ok()) return m.status().WithContext(what);
  return InKernelLayout(ckpt, std::move(*m), t, pool);
}

}  // namespace

Result<WeightMatrix> LoadWeight(const Checkpoint& ckpt, const std::string& name, const std::vector<int64_t>& shape,
                                int64_t rows, int64_t cols, std::optional<WeightFormat> format, ThreadPool* pool) {
  PHI4MM_ASSIGN_OR_RETURN(TensorView t, ckpt.Get(name, shape));
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  if (numel != rows * cols)
    return Internal("tensor '" + ckpt.SourceName(name) + "' has " + std::to_string(numel) + " values, not the " +
                    std::to_string(rows) + "x" + std::to_string(cols) + " the model needs");
  if (t.packed) return LoadPacked(ckpt, name, t, rows, cols, format, pool);
  auto stored = WeightMatrix::FromData(t.dtype, t.data, rows, cols);
  if (!stored.ok()) return stored.status().WithContext("tensor '" + ckpt.SourceName(name) + "'");
  if (!format || *format == stored->format()) return stored;
  auto converted = stored->Quantize(*format, pool);
  if (!converted.ok()) return converted.status().WithContext("converting tensor '" + ckpt.SourceName(name) + "'");
  AdviseUnneeded(t.data, t.nbytes);
  if (ConversionLog* log = ckpt.conversion_log()) {
    auto keep = std::make_shared<WeightMatrix>(*converted);
    log->Record(name, {WeightFormatName(*format), rows, cols, std::shared_ptr<const uint8_t>(keep, keep->data()),
                       keep->bytes()});
  }
  return InKernelLayout(ckpt, std::move(*converted), t, pool);
}

Result<std::vector<float>> LoadFloats(const Checkpoint& ckpt, const std::string& name,
                                      const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  PHI4MM_ASSIGN_OR_RETURN(WeightMatrix m, LoadWeight(ckpt, name, shape, 1, n));
  std::vector<float> v(static_cast<size_t>(n));
  m.Row(0, v.data());
  return v;
}

}  // namespace phi4mm
