// safetensors parsing and validation.
#include "phi4mm/io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

namespace phi4mm {

namespace {
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the format's own limit is 100 MB
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeToString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::string TensorView::ShapeString() const { return ShapeToString(shape); }

Result<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  PHI4MM_ASSIGN_OR_RETURN(auto map, FileMap::Open(path));
  return Parse(map, map->data(), map->size(), path);
}

Result<SafetensorsFile> SafetensorsFile::Parse(std::shared_ptr<const FileMap> owner, const uint8_t* bytes,
                                               size_t size, const std::string& label) {
  const std::string where = "safetensors file '" + label + "'";
  if (size < 8)
    return DataLoss(where + " is " + std::to_string(size) +
                    " bytes long, too short to hold the 8-byte header length (truncated?)");
  uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i) header_len |= static_cast<uint64_t>(bytes[i]) << (8 * i);
  if (header_len > kMaxHeaderBytes)
    return DataLoss(where + " declares a " + std::to_string(header_len) +
                    "-byte JSON header (limit 100 MB): not a safetensors file, or corrupt");
  if (header_len > size - 8)
    return DataLoss(where + " declares a " + std::to_string(header_len) + "-byte header but only " +
                    std::to_string(size - 8) + " bytes follow (truncated?)");
  const char* hbegin = reinterpret_cast<const char*>(bytes + 8);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(hbegin, hbegin + header_len);
  } catch (const nlohmann::json::exception& e) {
    return DataLoss(where + " has a malformed JSON header: " + e.what());
  }
  if (!header.is_object()) return DataLoss(where + ": the JSON header is not an object");

  SafetensorsFile f;
  f.map_ = std::move(owner);
  f.path_ = label;
  const uint8_t* data = bytes + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const auto& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) return DataLoss(where + ": __metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m)
        if (m.value().is_string()) f.metadata_[m.key()] = m.value().get<std::string>();
      continue;
    }
    const std::string tw = where + ", tensor '" + name + "'";
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
      return DataLoss(tw + ": entry must be an object with dtype, shape and data_offsets");
    const auto& jd = v["dtype"];
    const auto& js = v["shape"];
    const auto& jo = v["data_offsets"];
    if (!jd.is_string()) return DataLoss(tw + ": dtype is not a string");
    auto dt = ParseSafetensorsDType(jd.get<std::string>());
    if (!dt) return Unsupported(tw + ": unsupported dtype '" + jd.get<std::string>() + "'");
    if (!js.is_array()) return DataLoss(tw + ": shape is not an array");
    TensorView t;
    t.dtype = *dt;
    t.file = label;
    uint64_t numel = 1;
    for (const auto& d : js) {
      if (!d.is_number_unsigned()) return DataLoss(tw + ": shape has a non-integer or negative dimension");
      const uint64_t dim = d.get<uint64_t>();
      if (dim != 0 && numel > std::numeric_limits<uint64_t>::max() / 64 / dim)
        return DataLoss(tw + ": shape " + js.dump() + " is absurdly large");
      numel *= dim;
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    if (!jo.is_array() || jo.size() != 2 || !jo[0].is_number_unsigned() || !jo[1].is_number_unsigned())
      return DataLoss(tw + ": data_offsets must be two non-negative integers");
    const uint64_t b = jo[0].get<uint64_t>(), e = jo[1].get<uint64_t>();
    if (b > e || e > data_size)
      return DataLoss(tw + ": data_offsets [" + std::to_string(b) + ", " + std::to_string(e) +
                      "] lie outside the " + std::to_string(data_size) + "-byte data section (truncated file?)");
    if (e - b != numel * DTypeSize(t.dtype))
      return DataLoss(tw + ": shape " + t.ShapeString() + " of " + DTypeName(t.dtype) + " needs " +
                      std::to_string(numel * DTypeSize(t.dtype)) + " bytes but data_offsets span " +
                      std::to_string(e - b));
    t.data = data + b;
    t.nbytes = e - b;
    if (e > b) ranges.emplace_back(b, e);
    f.tensors_.emplace(name, std::move(t));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second)
      return DataLoss(where + ": two tensors overlap in the data section (corrupt header)");
  return f;
}

}  // namespace phi4mm
