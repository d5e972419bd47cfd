// Reader for the safetensors format: an 8-byte little-endian header length, a JSON header mapping
// tensor names to {dtype, shape, data_offsets}, then the raw data. The file is memory-mapped and
// tensors are zero-copy views into the mapping. Every header field is validated (sizes, offsets,
// overlaps, dtype/shape agreement) so a corrupt or truncated file gives a clear error.
//
// Files written by `phi4mm quantize` (docs/design.md, "Pre-quantized checkpoints") are ordinary
// safetensors files whose `__metadata__` marks them ("phi4mm.format") and describes each packed
// tensor: a U8 [rows, row_bytes] tensor holding rows of a WeightMatrix storage format, with the
// logical shape of the tensor it replaces. The reader validates that metadata, attaches it to the
// tensor's view (TensorView::packed) and hides the alignment padding tensors the writer adds.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "phi4mm/base/dtype.h"
#include "phi4mm/base/file_map.h"
#include "phi4mm/base/status.h"

namespace phi4mm {

// Metadata keys of pre-quantized files (values are strings, as safetensors requires).
inline constexpr const char* kPackedFormatKey = "phi4mm.format";  // = kPackedFormatValue
inline constexpr const char* kPackedFormatValue = "phi4mm-prequantized";
inline constexpr const char* kPackedVersionKey = "phi4mm.version";  // = kPackedVersion
inline constexpr const char* kPackedVersion = "2";
inline constexpr const char* kPackedQuantKey = "phi4mm.quant";  // the LoadOptions quant mode: "q4", ...
// Prefix of the per-tensor keys: "phi4mm.tensor.<stored name>" -> {"format","shape","rows","cols"} as JSON.
inline constexpr const char* kPackedTensorKeyPrefix = "phi4mm.tensor.";
// Prefix of the U8 padding tensors that align every tensor's data offset (hidden by the reader).
inline constexpr const char* kPaddingTensorPrefix = "phi4mm.pad.";

// A tensor stored as rows of a weight storage format (dtype U8, shape [rows, row_bytes]).
struct PackedTensor {
  std::string format;          // WeightFormatName of the storage ("q4_k", "q8_0", "bf16", ...)
  std::vector<int64_t> shape;  // the logical shape of the tensor it replaces
  int64_t rows = 0, cols = 0;  // the matrix the rows form; rows * cols = numel(shape)
};

struct TensorView {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t nbytes = 0;
  std::string file;  // where it came from, for error messages
  std::optional<PackedTensor> packed;  // set for a pre-quantized tensor

  int64_t numel() const;  // of `shape` as stored
  // The shape the model sees: packed->shape for a pre-quantized tensor, else `shape`.
  const std::vector<int64_t>& LogicalShape() const { return packed ? packed->shape : shape; }
  std::string ShapeString() const;  // "[5120, 3072]"
};

class SafetensorsFile {
 public:
  static Result<SafetensorsFile> Open(const std::string& path);
  // Parses an in-memory buffer (used by the fuzzer); `owner` keeps the bytes alive.
  static Result<SafetensorsFile> Parse(std::shared_ptr<const FileMap> owner, const uint8_t* bytes,
                                       size_t size, const std::string& label);

  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The quant mode of a file written by `phi4mm quantize` (metadata kPackedQuantKey), else "".
  const std::string& packed_quant() const { return packed_quant_; }
  const std::string& path() const { return path_; }

 private:
  // Validates the phi4mm.* metadata of a pre-quantized file and applies it to the tensors.
  Status ApplyPackedMetadata(const std::string& where);

  std::shared_ptr<const FileMap> map_;
  std::string path_;
  std::map<std::string, TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
  std::string packed_quant_;
};

std::string ShapeToString(const std::vector<int64_t>& shape);

}  // namespace phi4mm
