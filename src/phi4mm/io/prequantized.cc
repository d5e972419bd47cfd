// ConversionLog and the pre-quantized checkpoint writer.
#include "phi4mm/io/prequantized.h"

#include <algorithm>
#include <filesystem>
#include <set>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

#include "phi4mm/base/file_map.h"
#include "phi4mm/io/safetensors_writer.h"

namespace phi4mm {

namespace fs = std::filesystem;

void ConversionLog::Record(const std::string& canonical_name, Entry e) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(canonical_name);
  if (it != entries_.end() && it->second.format != e.format && conflict_.empty())
    conflict_ = "'" + canonical_name + "' (" + it->second.format + " and " + e.format + ")";
  entries_[canonical_name] = std::move(e);
}

std::map<std::string, ConversionLog::Entry> ConversionLog::entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_;
}

std::string ConversionLog::conflict() const {
  std::lock_guard<std::mutex> lock(mu_);
  return conflict_;
}

namespace {

std::string PackedJson(const std::string& format, const std::vector<int64_t>& shape, int64_t rows, int64_t cols) {
  nlohmann::json j = {{"format", format}, {"shape", shape}, {"rows", rows}, {"cols", cols}};
  return j.dump();
}

Status FsError(const std::string& what, const std::error_code& ec) {
  return NotFound(what + ": " + ec.message());
}

}  // namespace

Result<PrequantizedWriteStats> WritePrequantizedCheckpoint(const Checkpoint& ckpt, const ConversionLog& log,
                                                           const std::string& quant, const std::string& out_dir) {
  if (!log.conflict().empty())
    return Internal("tensor " + log.conflict() + " was converted to two formats; a pre-quantized folder holds one");
  std::error_code ec;
  const fs::path in = fs::path(ckpt.dir());
  const fs::path out = fs::path(out_dir);
  const fs::path inside = fs::weakly_canonical(out, ec).lexically_relative(fs::weakly_canonical(in, ec));
  if (!ec && !inside.empty() && *inside.begin() != "..")
    return InvalidArgument("the output folder '" + out_dir + "' is the input folder '" + ckpt.dir() +
                           "' or inside it; choose another one");
  fs::create_directories(out, ec);
  if (ec) return FsError("cannot create the output folder '" + out_dir + "'", ec);

  const std::map<std::string, ConversionLog::Entry> converted = log.entries();
  PrequantizedWriteStats stats;
  std::set<fs::path> written;  // relative paths the weights went to
  uint64_t main_tensor_bytes = 0;
  for (size_t i = 0; i < ckpt.files().size(); ++i) {
    const SafetensorsFile& file = ckpt.files()[i];
    const fs::path rel = fs::path(file.path()).lexically_relative(in);
    if (rel.empty() || *rel.begin() == "..")
      return Internal("safetensors file '" + file.path() + "' is not inside '" + ckpt.dir() + "'");
    std::map<std::string, std::string> metadata;
    for (const auto& [k, v] : file.metadata())
      if (k.rfind("phi4mm.", 0) != 0) metadata[k] = v;
    metadata[kPackedFormatKey] = kPackedFormatValue;
    metadata[kPackedVersionKey] = kPackedVersion;
    metadata[kPackedQuantKey] = quant;
    std::vector<std::pair<const uint8_t*, TensorToWrite>> order;
    uint64_t tensor_bytes = 0;
    for (const auto& [name, view] : file.tensors()) {
      TensorToWrite t;
      t.name = name;
      auto c = converted.find(ckpt.CanonicalNameIn(i, name));
      if (c != converted.end()) {
        const ConversionLog::Entry& e = c->second;
        const int64_t row_bytes = e.rows > 0 ? static_cast<int64_t>(e.nbytes) / e.rows : 0;
        if (e.rows > 0 && static_cast<size_t>(row_bytes * e.rows) != e.nbytes)
          return Internal("converted tensor '" + name + "' has " + std::to_string(e.nbytes) + " bytes for " +
                          std::to_string(e.rows) + " rows");
        t.dtype = DType::kU8;
        t.shape = {e.rows, row_bytes};
        t.data = e.bytes.get();
        t.nbytes = e.nbytes;
        metadata[std::string(kPackedTensorKeyPrefix) + name] = PackedJson(e.format, view.LogicalShape(), e.rows, e.cols);
        ++stats.packed_tensors;
      } else {
        t.dtype = view.dtype;
        t.shape = view.shape;
        t.data = view.data;
        t.nbytes = view.nbytes;
        if (view.packed) {
          metadata[std::string(kPackedTensorKeyPrefix) + name] =
              PackedJson(view.packed->format, view.packed->shape, view.packed->rows, view.packed->cols);
          ++stats.packed_tensors;
        }
      }
      tensor_bytes += t.nbytes;
      order.emplace_back(view.data, std::move(t));
    }
    // The input's order of the data (the reader's order is by name).
    std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<TensorToWrite> tensors;
    tensors.reserve(order.size());
    for (auto& [ptr, t] : order) tensors.push_back(std::move(t));
    const fs::path dst = out / rel;
    fs::create_directories(dst.parent_path(), ec);
    if (ec) return FsError("cannot create '" + dst.parent_path().string() + "'", ec);
    PHI4MM_ASSIGN_OR_RETURN(uint64_t nbytes, WriteSafetensors(dst.string(), tensors, metadata));
    stats.bytes_out += nbytes;
    stats.bytes_in += fs::file_size(file.path(), ec);
    ++stats.weight_files;
    written.insert(rel);
    if (rel.parent_path().empty()) main_tensor_bytes += tensor_bytes;
  }

  const fs::path index = "model.safetensors.index.json";
  if (fs::exists(in / index)) {
    PHI4MM_ASSIGN_OR_RETURN(std::string text, ReadFileToString((in / index).string()));
    nlohmann::json idx;
    try {
      idx = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      return InvalidArgument("malformed JSON in '" + (in / index).string() + "': " + e.what());
    }
    if (!idx.is_object()) return InvalidArgument("'" + (in / index).string() + "' is not a JSON object");
    if (!idx.contains("metadata") || !idx["metadata"].is_object()) idx["metadata"] = nlohmann::json::object();
    idx["metadata"]["total_size"] = main_tensor_bytes;
    idx["metadata"][kPackedQuantKey] = quant;
    const std::string dst = (out / index).string();
    std::FILE* f = std::fopen(dst.c_str(), "wb");
    const std::string body = idx.dump(2) + "\n";
    if (f == nullptr) return NotFound("cannot create '" + dst + "'");
    const bool ok = std::fwrite(body.data(), 1, body.size(), f) == body.size();
    if (std::fclose(f) != 0 || !ok) return DataLoss("writing '" + dst + "' failed (disk full?)");
    written.insert(index);
  }

  for (auto it = fs::recursive_directory_iterator(in, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    const fs::path rel = it->path().lexically_relative(in);
    if (it->path().filename().string().rfind('.', 0) == 0) {
      if (it->is_directory()) it.disable_recursion_pending();
      continue;
    }
    if (it->is_directory()) {
      fs::create_directories(out / rel, ec);
      if (ec) return FsError("cannot create '" + (out / rel).string() + "'", ec);
      continue;
    }
    if (!it->is_regular_file() || written.count(rel)) continue;
    fs::copy_file(it->path(), out / rel, fs::copy_options::overwrite_existing, ec);
    if (ec) return FsError("cannot copy '" + it->path().string() + "' to '" + (out / rel).string() + "'", ec);
    ++stats.other_files;
  }
  if (ec) return FsError("cannot list '" + ckpt.dir() + "'", ec);
  return stats;
}

}  // namespace phi4mm
