// TensorTap: an observer that receives named intermediate tensors (float32, row-major) while a
// model runs. Used by `phi4mm run --dump` and by the parity tests; models call it only when one is
// attached, so it costs nothing otherwise.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace phi4mm {

class TensorTap {
 public:
  virtual ~TensorTap() = default;
  virtual void Tap(const std::string& name, const float* data, const std::vector<int64_t>& shape) = 0;
};

}  // namespace phi4mm
