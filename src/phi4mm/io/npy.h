// Minimal NumPy .npy (format 1.0) writing and reading for float32 and int64 arrays: what
// `phi4mm run --dump` writes and what debugging scripts read with numpy.load.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "phi4mm/base/status.h"

namespace phi4mm {

Status WriteNpyF32(const std::string& path, const float* data, const std::vector<int64_t>& shape);
Status WriteNpyI64(const std::string& path, const int64_t* data, const std::vector<int64_t>& shape);

struct NpyArray {
  std::string dtype;  // "<f4" or "<i8"
  std::vector<int64_t> shape;
  std::vector<float> f32;
  std::vector<int64_t> i64;
};
Result<NpyArray> ReadNpy(const std::string& path);

}  // namespace phi4mm
