// Element types of tensors as they appear in checkpoints (safetensors dtype strings), with their
// sizes and names.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace phi4mm {

enum class DType { kF32, kF16, kBF16, kF64, kI64, kI32, kI16, kI8, kU8, kBool };

size_t DTypeSize(DType t);
const char* DTypeName(DType t);  // safetensors spelling: "F32", "BF16", ...
std::optional<DType> ParseSafetensorsDType(std::string_view s);

}  // namespace phi4mm
