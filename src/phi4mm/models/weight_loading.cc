// LoadWeight / LoadFloats: checkpoint tensor -> WeightMatrix view or converted copy.
#include "phi4mm/models/weight_loading.h"

#include "phi4mm/base/file_map.h"

namespace phi4mm {

Result<WeightMatrix> LoadWeight(const Checkpoint& ckpt, const std::string& name, const std::vector<int64_t>& shape,
                                int64_t rows, int64_t cols, std::optional<WeightFormat> format, ThreadPool* pool) {
  PHI4MM_ASSIGN_OR_RETURN(TensorView t, ckpt.Get(name, shape));
  if (t.numel() != rows * cols)
    return Internal("tensor '" + ckpt.SourceName(name) + "' has " + std::to_string(t.numel()) +
                    " values, not the " + std::to_string(rows) + "x" + std::to_string(cols) + " the model needs");
  auto stored = WeightMatrix::FromData(t.dtype, t.data, rows, cols);
  if (!stored.ok()) return stored.status().WithContext("tensor '" + ckpt.SourceName(name) + "'");
  if (!format || *format == stored->format()) return stored;
  auto converted = stored->Quantize(*format, pool);
  if (!converted.ok()) return converted.status().WithContext("converting tensor '" + ckpt.SourceName(name) + "'");
  AdviseUnneeded(t.data, t.nbytes);
  return converted;
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
