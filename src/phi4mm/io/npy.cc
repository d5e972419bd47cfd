// .npy header formatting and parsing (little-endian, C order only).
#include "phi4mm/io/npy.h"

#include <cstring>
#include <fstream>
#include <regex>

#include "phi4mm/base/file_map.h"

namespace phi4mm {

namespace {

Status WriteNpy(const std::string& path, const char* descr, const void* data, size_t elem,
                const std::vector<int64_t>& shape) {
  std::string shp = "(";
  size_t n = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    shp += std::to_string(shape[i]) + (shape.size() == 1 ? "," : (i + 1 < shape.size() ? ", " : ""));
    n *= static_cast<size_t>(shape[i]);
  }
  shp += ")";
  std::string header = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + shp + ", }";
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  if (!out) return InvalidArgument("cannot write '" + path + "'");
  const uint16_t hlen = static_cast<uint16_t>(header.size());
  out.write("\x93NUMPY\x01\x00", 8);
  out.put(static_cast<char>(hlen & 0xff));
  out.put(static_cast<char>(hlen >> 8));
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(n * elem));
  if (!out) return InvalidArgument("error while writing '" + path + "' (disk full?)");
  return Status::Ok();
}

}  // namespace

Status WriteNpyF32(const std::string& path, const float* data, const std::vector<int64_t>& shape) {
  return WriteNpy(path, "<f4", data, 4, shape);
}

Status WriteNpyI64(const std::string& path, const int64_t* data, const std::vector<int64_t>& shape) {
  return WriteNpy(path, "<i8", data, 8, shape);
}

Result<NpyArray> ReadNpy(const std::string& path) {
  PHI4MM_ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(path));
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0) return DataLoss("'" + path + "' is not a .npy file");
  const size_t hlen = static_cast<uint8_t>(bytes[8]) | (static_cast<size_t>(static_cast<uint8_t>(bytes[9])) << 8);
  if (bytes[6] != 1 || 10 + hlen > bytes.size()) return DataLoss("'" + path + "': unsupported or truncated .npy header");
  const std::string header = bytes.substr(10, hlen);
  std::smatch m;
  NpyArray a;
  if (!std::regex_search(header, m, std::regex("'descr': *'([^']+)'"))) return DataLoss("'" + path + "': no descr");
  a.dtype = m[1];
  if (header.find("'fortran_order': False") == std::string::npos)
    return Unsupported("'" + path + "': only C-order arrays are supported");
  if (!std::regex_search(header, m, std::regex("'shape': *\\(([^)]*)\\)"))) return DataLoss("'" + path + "': no shape");
  const std::string dims = m[1];
  size_t n = 1;
  const std::regex number("[0-9]+");
  for (std::sregex_iterator it(dims.begin(), dims.end(), number), end; it != end; ++it) {
    a.shape.push_back(std::stoll(it->str()));
    n *= static_cast<size_t>(a.shape.back());
  }
  const char* data = bytes.data() + 10 + hlen;
  const size_t avail = bytes.size() - 10 - hlen;
  if (a.dtype == "<f4") {
    if (avail < n * 4) return DataLoss("'" + path + "' is truncated");
    a.f32.resize(n);
    std::memcpy(a.f32.data(), data, n * 4);
  } else if (a.dtype == "<i8") {
    if (avail < n * 8) return DataLoss("'" + path + "' is truncated");
    a.i64.resize(n);
    std::memcpy(a.i64.data(), data, n * 8);
  } else {
    return Unsupported("'" + path + "': dtype " + a.dtype + " is not supported (float32 and int64 are)");
  }
  return a;
}

}  // namespace phi4mm
