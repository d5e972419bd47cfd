// Helpers shared by the tests: fixture paths, reference tensors, a tap that keeps tensors in
// memory, and error-measure helpers.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "phi4mm/base/tensor_tap.h"
#include "phi4mm/io/safetensors.h"

namespace phi4mm::test {

std::string FixturesDir();
std::string FixturePath(const std::string& rel);
std::string TempDir(const std::string& name);  // a fresh empty folder under the test temp dir

// Float32 contents of a reference tensor (F32, BF16, F16 or I64 converted).
std::vector<float> ToFloats(const TensorView& t);
std::vector<int64_t> ToInts(const TensorView& t);

struct Captured {
  std::vector<float> data;
  std::vector<int64_t> shape;
};
class MemoryTap : public TensorTap {
 public:
  void Tap(const std::string& name, const float* data, const std::vector<int64_t>& shape) override;
  std::map<std::string, Captured> tensors;
};

double MaxAbs(const std::vector<float>& v);
double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b);

// Writes bytes to a file.
void WriteFile(const std::string& path, const std::string& bytes);
std::string ReadFile(const std::string& path);
// Copies a folder (flat, plus one level of sub-folders) for tests that corrupt a checkpoint.
void CopyDir(const std::string& from, const std::string& to);

}  // namespace phi4mm::test
