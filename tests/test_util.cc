// Test helper implementations.
#include "test_util.h"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "phi4mm/base/half.h"

namespace phi4mm::test {

namespace fs = std::filesystem;

std::string FixturesDir() { return PHI4MM_FIXTURES_DIR; }
std::string FixturePath(const std::string& rel) { return FixturesDir() + "/" + rel; }

std::string TempDir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("phi4mm_test_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

std::vector<float> ToFloats(const TensorView& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    switch (t.dtype) {
      case DType::kF32: { float f; std::memcpy(&f, t.data + 4 * i, 4); out[i] = f; break; }
      case DType::kBF16: { uint16_t h; std::memcpy(&h, t.data + 2 * i, 2); out[i] = Bf16ToF32(h); break; }
      case DType::kF16: { uint16_t h; std::memcpy(&h, t.data + 2 * i, 2); out[i] = F16ToF32(h); break; }
      case DType::kI64: { int64_t v; std::memcpy(&v, t.data + 8 * i, 8); out[i] = static_cast<float>(v); break; }
      default: out[i] = NAN;
    }
  }
  return out;
}

std::vector<int64_t> ToInts(const TensorView& t) {
  std::vector<int64_t> out(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    if (t.dtype == DType::kI64) std::memcpy(&out[i], t.data + 8 * i, 8);
    else if (t.dtype == DType::kI32) { int32_t v; std::memcpy(&v, t.data + 4 * i, 4); out[i] = v; }
  }
  return out;
}

void MemoryTap::Tap(const std::string& name, const float* data, const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  tensors[name] = Captured{std::vector<float>(data, data + n), shape};
}

double MaxAbs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, static_cast<double>(std::fabs(a[i] - b[i])));
  return m;
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void CopyDir(const std::string& from, const std::string& to) {
  fs::create_directories(to);
  fs::copy(from, to, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
}

}  // namespace phi4mm::test
