// Helpers shared by the tests: fixture paths, reference tensors, a tap that keeps tensors in
// memory, and error-measure helpers.
#pragma once

#include <map>
#include <memory>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "phi4mm/base/tensor_tap.h"
#include "phi4mm/io/safetensors.h"
#include "phi4mm/models/lora_mode.h"
#include "phi4mm/preprocess/audio.h"
#include "phi4mm/preprocess/audio_features.h"
#include "phi4mm/preprocess/image.h"
#include "phi4mm/runtime/model.h"

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

// n values drawn from N(0, sigma^2) by std::mt19937(seed): deterministic inputs for kernel tests.
std::vector<float> Gaussian(size_t n, uint32_t seed, float sigma = 1.0f);
// The same with every 97th value times 8: a few outliers, as real activations and weights have.
std::vector<float> GaussianWithOutliers(size_t n, uint32_t seed, float sigma = 1.0f);
// A fixture image or audio file (a path under tests/fixtures), decoded; a failed decode is a test
// failure and gives an empty value.
Image FixtureImage(const std::string& rel);
AudioClip FixtureAudio(const std::string& rel);

double MaxAbs(const std::vector<float>& v);
double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b);

// How close `got` is to `want` as a whole (the encoders' quantization tests): cosine similarity and
// RMS error relative to want's RMS, both accumulated in double.
struct FeatureDiff {
  double cosine = 0, rel_rms = 0;
};
FeatureDiff CompareFeatures(const std::vector<float>& got, const std::vector<float>& want);

// The features of a reference speech clip (its "log_mel" tensor, [frames, mel bins]) for
// `num_tokens` audio placeholder tokens.
AudioFeatures ClipFeatures(const std::map<std::string, TensorView>& ref, int64_t num_tokens);

// The real tokenizer of tests/fixtures/tokenizer, loaded once per process (aborts the test binary
// with a reported failure if it cannot be loaded: every tokenizer test needs it).
const Tokenizer& FixtureTokenizer();

// The tiny fixture model of a layout ("orig" or "native"), loaded once per process.
std::shared_ptr<const Model> TinyModel(const std::string& layout);

// One decoder case of tests/fixtures/tiny/reference/cases.json.
struct DecoderCase {
  std::string name, lora, file;
  std::vector<int32_t> input_ids;
  int64_t steps = 0;
  bool crosses_switch = false;  // starts below original_max_position_embeddings and passes it
};
std::vector<DecoderCase> LoadDecoderCases();
// GoogleTest prints a case parameter by its name.
void PrintTo(const DecoderCase& c, std::ostream* os);
LoraMode LoraModeOf(const std::string& name);  // "none" | "vision" | "speech"

// The parity measure of every reference test: max |got - want| <= rel_tol * max |want|. The
// ratio is folded into *worst (when given) for the printed summary.
void ExpectCloseRel(std::span<const float> got, std::span<const float> want, double rel_tol, const std::string& what,
                    double* worst = nullptr);
// The logits of a generation (taps "prefill.logits", then "step.<k>.logits") against the reference
// tensors "<ref_prefix>step.<k>.logits", which hold only the live ids (docs/fixtures.md); every
// other logit must be exactly 0.
void ExpectStepLogits(const MemoryTap& tap, const std::map<std::string, TensorView>& ref,
                      std::span<const int64_t> live, int64_t steps, double rel_tol, const std::string& what,
                      double* worst = nullptr, const std::string& ref_prefix = "");

// Writes bytes to a file.
void WriteFile(const std::string& path, const std::string& bytes);
std::string ReadFile(const std::string& path);
// Copies a folder (flat, plus one level of sub-folders) for tests that corrupt a checkpoint.
void CopyDir(const std::string& from, const std::string& to);

}  // namespace phi4mm::test
