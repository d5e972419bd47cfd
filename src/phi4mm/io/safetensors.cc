// safetensors parsing and validation.
#include "phi4mm/io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

namespace phi4mm {

namespace {

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the format's own limit is 100 MB

bool StartsWith(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }

// A non-negative JSON integer that fits comfortably in int64 (dimensions, row counts).
std::optional<int64_t> Dim(const nlohmann::json& j) {
  if (!j.is_number_unsigned()) return std::nullopt;
  const uint64_t v = j.get<uint64_t>();
  if (v > (1ull << 48)) return std::nullopt;
  return static_cast<int64_t>(v);
}

// The value of one "phi4mm.tensor.<name>" key, checked against the stored tensor it describes.
Result<PackedTensor> ParsePackedEntry(const std::string& tw, const std::string& text, const TensorView& t) {
  const std::string bad = tw + ": pre-quantization metadata ";
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return DataLoss(bad + "is not valid JSON (" + e.what() + "); re-run phi4mm quantize");
  }
  if (!j.is_object() || !j.contains("format") || !j.contains("shape") || !j.contains("rows") || !j.contains("cols"))
    return DataLoss(bad + "must be an object with format, shape, rows and cols; re-run phi4mm quantize");
  PackedTensor p;
  if (!j["format"].is_string() || j["format"].get<std::string>().empty())
    return DataLoss(bad + "has no format name");
  p.format = j["format"].get<std::string>();
  if (!j["shape"].is_array() || j["shape"].empty() || j["shape"].size() > 8)
    return DataLoss(bad + "has a shape that is not an array of 1 to 8 dimensions");
  int64_t numel = 1;
  for (const auto& d : j["shape"]) {
    auto dim = Dim(d);
    if (!dim) return DataLoss(bad + "has a shape with a negative, non-integer or huge dimension");
    if (*dim != 0 && numel > (int64_t{1} << 48) / *dim) return DataLoss(bad + "has an absurdly large shape");
    numel *= *dim;
    p.shape.push_back(*dim);
  }
  auto rows = Dim(j["rows"]), cols = Dim(j["cols"]);
  if (!rows || !cols) return DataLoss(bad + "has rows/cols that are not non-negative integers");
  p.rows = *rows;
  p.cols = *cols;
  if (p.cols != 0 && p.rows > numel / p.cols) return DataLoss(bad + "has rows x cols larger than its shape");
  if (p.rows * p.cols != numel)
    return DataLoss(bad + "says " + std::to_string(p.rows) + "x" + std::to_string(p.cols) + " but its shape " +
                    ShapeToString(p.shape) + " holds " + std::to_string(numel) + " values");
  if (t.dtype != DType::kU8 || t.shape.size() != 2 || t.shape[0] != p.rows)
    return DataLoss(tw + " is described as " + std::to_string(p.rows) + " packed rows but is stored as " +
                    DTypeName(t.dtype) + " " + t.ShapeString() + " (expected U8 [" + std::to_string(p.rows) +
                    ", row_bytes]); re-run phi4mm quantize");
  return p;
}

}  // namespace

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
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (m.value().is_string()) f.metadata_[m.key()] = m.value().get<std::string>();
        else if (StartsWith(m.key(), "phi4mm."))
          return DataLoss(where + ": __metadata__ key '" + m.key() + "' is not a string (corrupt pre-quantized file)");
      }
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
  PHI4MM_RETURN_IF_ERROR(f.ApplyPackedMetadata(where));
  return f;
}

Status SafetensorsFile::ApplyPackedMetadata(const std::string& where) {
  bool any = false;
  for (const auto& [k, v] : metadata_) any = any || StartsWith(k, "phi4mm.");
  if (!any) return Status::Ok();
  auto fmt = metadata_.find(kPackedFormatKey);
  if (fmt == metadata_.end() || fmt->second != kPackedFormatValue)
    return DataLoss(where + ": __metadata__ has phi4mm.* keys but '" + kPackedFormatKey + "' is not \"" +
                    kPackedFormatValue + "\" (corrupt pre-quantized file; re-run phi4mm quantize)");
  auto ver = metadata_.find(kPackedVersionKey);
  if (ver == metadata_.end())
    return DataLoss(where + ": pre-quantized file without '" + kPackedVersionKey + "' (re-run phi4mm quantize)");
  if (ver->second != kPackedVersion)
    return Unsupported(where + " is a pre-quantized file of format version '" + ver->second +
                       "' but this phi4mm reads version " + kPackedVersion +
                       ": quantize the original checkpoint again with this phi4mm");
  auto quant = metadata_.find(kPackedQuantKey);
  if (quant == metadata_.end() || quant->second.empty())
    return DataLoss(where + ": pre-quantized file without its quant mode '" + kPackedQuantKey +
                    "' (re-run phi4mm quantize)");
  packed_quant_ = quant->second;
  const std::string tprefix = kPackedTensorKeyPrefix;
  for (const auto& [k, v] : metadata_) {
    if (!StartsWith(k, "phi4mm.") || k == kPackedFormatKey || k == kPackedVersionKey || k == kPackedQuantKey) continue;
    if (!StartsWith(k, kPackedTensorKeyPrefix))
      return DataLoss(where + ": unknown pre-quantization metadata key '" + k + "' (re-run phi4mm quantize)");
    const std::string name = k.substr(tprefix.size());
    auto it = tensors_.find(name);
    if (it == tensors_.end())
      return DataLoss(where + ": metadata describes tensor '" + name + "' that the file does not hold");
    PHI4MM_ASSIGN_OR_RETURN(it->second.packed, ParsePackedEntry(where + ", tensor '" + name + "'", v, it->second));
  }
  for (auto it = tensors_.begin(); it != tensors_.end();) {
    if (StartsWith(it->first, kPaddingTensorPrefix)) {
      if (it->second.dtype != DType::kU8 || it->second.shape.size() != 1 || it->second.packed)
        return DataLoss(where + ": padding tensor '" + it->first + "' is not a 1-D U8 tensor");
      it = tensors_.erase(it);
    } else {
      ++it;
    }
  }
  return Status::Ok();
}

}  // namespace phi4mm
