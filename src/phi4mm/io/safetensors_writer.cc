// safetensors writing with aligned tensor data.
#include "phi4mm/io/safetensors_writer.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include <nlohmann/json.hpp>

#include "phi4mm/io/safetensors.h"

namespace phi4mm {

namespace {

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

}  // namespace

Result<uint64_t> WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                                  const std::map<std::string, std::string>& metadata, size_t alignment) {
  if (alignment == 0 || alignment > 4096) return InvalidArgument("safetensors alignment must be in [1, 4096]");
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  // Pieces of the data section in order: a tensor's bytes, or `size` zero bytes of padding.
  struct Piece {
    const uint8_t* data;
    uint64_t size;
  };
  std::vector<Piece> pieces;
  uint64_t offset = 0;
  int pads = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorToWrite& t = tensors[i];
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0) return InvalidArgument("tensor '" + t.name + "' has a negative dimension");
      numel *= static_cast<uint64_t>(d);
    }
    if (numel * DTypeSize(t.dtype) != t.nbytes)
      return InvalidArgument("tensor '" + t.name + "': " + DTypeName(t.dtype) + " " + ShapeToString(t.shape) +
                             " needs " + std::to_string(numel * DTypeSize(t.dtype)) + " bytes, got " +
                             std::to_string(t.nbytes));
    if (header.contains(t.name)) return InvalidArgument("tensor '" + t.name + "' is written twice");
    header[t.name] = {{"dtype", DTypeName(t.dtype)}, {"shape", t.shape}, {"data_offsets", nlohmann::json::array({offset, offset + t.nbytes})}};
    pieces.push_back({t.data, t.nbytes});
    offset += t.nbytes;
    // Padding before the next tensor: offsets are aligned within the data section here, and the
    // header is padded below so that the data section itself starts aligned.
    if (i + 1 < tensors.size() && offset % alignment != 0) {
      const uint64_t pad = alignment - offset % alignment;
      const std::string pname = std::string(kPaddingTensorPrefix) + std::to_string(pads++);
      header[pname] = {{"dtype", "U8"}, {"shape", nlohmann::json::array({pad})}, {"data_offsets", nlohmann::json::array({offset, offset + pad})}};
      pieces.push_back({nullptr, pad});
      offset += pad;
    }
  }
  std::string text = header.dump();
  const size_t total_header = 8 + text.size();
  if (total_header % alignment != 0) text.append(alignment - total_header % alignment, ' ');

  std::unique_ptr<std::FILE, FileCloser> f(std::fopen(path.c_str(), "wb"));
  if (!f) return NotFound("cannot create '" + path + "': " + std::strerror(errno));
  std::setvbuf(f.get(), nullptr, _IOFBF, 1 << 20);
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
  const std::string werr = "writing '" + path + "' failed (disk full?): ";
  if (std::fwrite(len, 1, 8, f.get()) != 8 || std::fwrite(text.data(), 1, text.size(), f.get()) != text.size())
    return DataLoss(werr + std::strerror(errno));
  static const uint8_t kZeros[4096] = {};
  for (const Piece& p : pieces) {
    const uint8_t* src = p.data != nullptr ? p.data : kZeros;
    if (p.size > 0 && std::fwrite(src, 1, p.size, f.get()) != p.size) return DataLoss(werr + std::strerror(errno));
  }
  std::FILE* raw = f.release();
  if (std::fclose(raw) != 0) return DataLoss(werr + std::strerror(errno));
  return static_cast<uint64_t>(8 + text.size() + offset);
}

}  // namespace phi4mm
