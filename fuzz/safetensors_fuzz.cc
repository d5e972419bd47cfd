// libFuzzer target for the safetensors reader: SafetensorsFile::Parse on arbitrary bytes. A parse
// that succeeds must describe tensors that lie inside the buffer, so every tensor's bytes are read
// (ASan reports any view that points outside), and numel/ShapeString must agree with the byte
// count the parser accepted; a pre-quantized tensor's metadata must agree with its stored shape
// (the corpus has a pre-quantized file). Errors must carry a message. Any crash or sanitizer report
// is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "phi4mm/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto r = phi4mm::SafetensorsFile::Parse(nullptr, data, size, "fuzz");
  if (!r.ok()) {
    if (r.status().message().empty()) std::abort();
    return 0;
  }
  unsigned checksum = 0;
  for (const auto& [name, t] : r->tensors()) {
    const int64_t n = t.numel();
    if (n < 0) std::abort();
    if (static_cast<uint64_t>(n) * phi4mm::DTypeSize(t.dtype) != t.nbytes) std::abort();
    const std::string shape = t.ShapeString();
    if (shape.size() < 2 || shape.front() != '[' || shape.back() != ']') std::abort();
    checksum += static_cast<unsigned>(name.size() + shape.size());
    if (t.packed) {
      int64_t logical = 1;
      for (int64_t d : t.packed->shape) logical *= d;
      if (t.packed->rows * t.packed->cols != logical || t.shape.size() != 2 || t.shape[0] != t.packed->rows ||
          t.dtype != phi4mm::DType::kU8 || t.packed->format.empty() || r->packed_quant().empty())
        std::abort();
    }
    if (t.nbytes > 0 && (t.data < data || t.data + t.nbytes > data + size)) std::abort();
    for (size_t i = 0; i < t.nbytes; ++i) checksum += t.data[i];
  }
  for (const auto& [k, v] : r->metadata()) checksum += static_cast<unsigned>(k.size() + v.size());
  volatile unsigned sink = checksum;
  (void)sink;
  return 0;
}
