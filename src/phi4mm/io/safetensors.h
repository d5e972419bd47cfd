// Reader for the safetensors format: an 8-byte little-endian header length, a JSON header mapping
// tensor names to {dtype, shape, data_offsets}, then the raw data. The file is memory-mapped and
// tensors are zero-copy views into the mapping. Every header field is validated (sizes, offsets,
// overlaps, dtype/shape agreement) so a corrupt or truncated file gives a clear error.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "phi4mm/base/dtype.h"
#include "phi4mm/base/file_map.h"
#include "phi4mm/base/status.h"

namespace phi4mm {

struct TensorView {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t nbytes = 0;
  std::string file;  // where it came from, for error messages

  int64_t numel() const;
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
  const std::string& path() const { return path_; }

 private:
  std::shared_ptr<const FileMap> map_;
  std::string path_;
  std::map<std::string, TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
};

std::string ShapeToString(const std::vector<int64_t>& shape);

}  // namespace phi4mm
