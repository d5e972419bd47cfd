// Helpers shared by the checkpoint-reading tests (checkpoint_format_test.cc, load_errors_test.cc):
// a tiny safetensors writer (tensors laid out back to back in the order given) and reader, a check
// that a Status has the expected code and names what is at fault, and fresh, editable copies of the
// tiny fixture folders.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "phi4mm/base/status.h"
#include "phi4mm/io/safetensors.h"
#include "test_util.h"

namespace phi4mm::test {

constexpr const char* kShard1 = "model-00001-of-00003.safetensors";
constexpr const char* kShard2 = "model-00002-of-00003.safetensors";

struct RawTensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

inline std::string Frame(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

// The JSON header for `tensors` laid out back to back; their bytes are appended to *data.
inline nlohmann::json LayoutHeader(const std::vector<RawTensor>& tensors, std::string* data,
                                   const nlohmann::json& metadata = nullptr) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.is_null()) header["__metadata__"] = metadata;
  for (const RawTensor& t : tensors) {
    header[t.name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {data->size(), data->size() + t.bytes.size()}}};
    *data += t.bytes;
  }
  return header;
}

inline std::string BuildSafetensors(const std::vector<RawTensor>& tensors, const nlohmann::json& metadata = nullptr) {
  std::string data;
  const nlohmann::json header = LayoutHeader(tensors, &data, metadata);
  return Frame(header.dump(), data);
}

// Every tensor of a safetensors file, copied out so the file can be rewritten.
inline std::vector<RawTensor> ReadTensors(const std::string& path) {
  auto f = SafetensorsFile::Open(path);
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  std::vector<RawTensor> out;
  if (!f.ok()) return out;
  for (const auto& [name, t] : f->tensors())
    out.push_back({name, DTypeName(t.dtype), t.shape, std::string(reinterpret_cast<const char*>(t.data), t.nbytes)});
  return out;
}

// The status must have `code` and its message must contain every needle.
inline void ExpectError(const Status& st, StatusCode code, std::initializer_list<std::string> needles) {
  ASSERT_FALSE(st.ok()) << "expected an error, got OK";
  EXPECT_EQ(st.code(), code) << st.ToString();
  for (const std::string& n : needles)
    EXPECT_NE(st.message().find(n), std::string::npos) << "message lacks '" << n << "': " << st.message();
}

// A fresh copy of a tiny fixture layout ("orig" or "native") in a temp folder.
inline std::string CopyFixture(const std::string& layout, const std::string& name) {
  const std::string dir = TempDir(name) + "/" + layout;
  CopyDir(FixturePath("tiny/" + layout), dir);
  return dir;
}

// Reads a JSON file, lets `edit` change it, writes it back.
template <typename F>
void EditJson(const std::string& path, F edit) {
  nlohmann::json j = nlohmann::json::parse(ReadFile(path));
  edit(j);
  WriteFile(path, j.dump(2));
}

}  // namespace phi4mm::test
