// Writer for the safetensors format, used by `phi4mm quantize`: the 8-byte header length, the JSON
// header (tensors plus string `__metadata__`), then the tensors' bytes back to back. Every tensor's
// data starts at a multiple of `alignment` bytes from the start of the file, so the zero-copy views
// of a memory-mapped file are aligned: the header is padded with spaces (as the format allows) and
// 1-D U8 tensors named kPaddingTensorPrefix + k fill the gaps, which keeps the data section
// contiguous as strict readers (the Python safetensors library) require; SafetensorsFile hides them
// in files marked as pre-quantized.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "phi4mm/base/dtype.h"
#include "phi4mm/base/status.h"

namespace phi4mm {

struct TensorToWrite {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // nbytes = numel(shape) * DTypeSize(dtype), checked
  size_t nbytes = 0;
};

// Writes `tensors` in the given order. Returns the number of bytes written.
Result<uint64_t> WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                                  const std::map<std::string, std::string>& metadata, size_t alignment = 64);

}  // namespace phi4mm
