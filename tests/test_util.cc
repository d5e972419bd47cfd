// Test helper implementations.
#include "test_util.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "phi4mm/base/half.h"

namespace phi4mm::test {

namespace fs = std::filesystem;

std::string FixturesDir() { return PHI4MM_FIXTURES_DIR; }
std::string FixturePath(const std::string& rel) { return FixturesDir() + "/" + rel; }

namespace {
// The folders TempDir made in this process, removed when it exits (ctest runs every test in its
// own process, so folders named by pid piled up: 19 GB of them once filled the disk). Set
// PHI4MM_KEEP_TEST_DIRS to keep them for a look.
struct TempDirs {
  std::vector<fs::path> made;
  ~TempDirs() {
    if (std::getenv("PHI4MM_KEEP_TEST_DIRS") != nullptr) return;
    std::error_code ec;
    for (const fs::path& p : made) fs::remove_all(p, ec);
  }
};
TempDirs& Made() {
  static TempDirs dirs;
  return dirs;
}
}  // namespace

std::string TempDir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("phi4mm_test_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  Made().made.push_back(p);
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

Image FixtureImage(const std::string& rel) {
  auto img = DecodeImageFile(FixturePath(rel));
  EXPECT_TRUE(img.ok()) << rel << ": " << img.status().ToString();
  return img.ok() ? *img : Image{};
}

AudioClip FixtureAudio(const std::string& rel) {
  auto clip = DecodeAudioFile(FixturePath(rel));
  EXPECT_TRUE(clip.ok()) << rel << ": " << clip.status().ToString();
  return clip.ok() ? *clip : AudioClip{};
}

std::vector<float> Gaussian(size_t n, uint32_t seed, float sigma) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::vector<float> GaussianWithOutliers(size_t n, uint32_t seed, float sigma) {
  std::vector<float> v = Gaussian(n, seed, sigma);
  for (size_t i = 0; i < n; i += 97) v[i] *= 8.0f;
  return v;
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

FeatureDiff CompareFeatures(const std::vector<float>& got, const std::vector<float>& want) {
  double dot = 0, gg = 0, ww = 0, ee = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    dot += static_cast<double>(got[i]) * want[i];
    gg += static_cast<double>(got[i]) * got[i];
    ww += static_cast<double>(want[i]) * want[i];
    ee += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
  }
  return {dot / std::sqrt(gg * ww), std::sqrt(ee / ww)};
}

AudioFeatures ClipFeatures(const std::map<std::string, TensorView>& ref, int64_t num_tokens) {
  AudioFeatures f;
  const TensorView& mel = ref.at("log_mel");
  f.frames = mel.shape[0];
  f.num_mel = mel.shape[1];
  f.log_mel = ToFloats(mel);
  f.num_tokens = num_tokens;
  return f;
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

const Tokenizer& FixtureTokenizer() {
  static const std::shared_ptr<const Tokenizer> tok = [] {
    auto r = Tokenizer::LoadFromDir(FixturePath("tokenizer"));
    if (!r.ok()) {
      ADD_FAILURE() << r.status().ToString();
      return std::shared_ptr<const Tokenizer>();
    }
    return *r;
  }();
  if (!tok) std::abort();
  return *tok;
}

std::shared_ptr<const Model> TinyModel(const std::string& layout) {
  static std::map<std::string, std::shared_ptr<const Model>> cache;
  auto& m = cache[layout];
  if (!m) {
    auto r = Model::Load(FixturePath("tiny/" + layout));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (r.ok()) m = *r;
  }
  return m;
}

std::vector<DecoderCase> LoadDecoderCases() {
  std::ifstream in(FixturePath("tiny/reference/cases.json"));
  const nlohmann::json j = nlohmann::json::parse(in);
  std::vector<DecoderCase> cases;
  for (const auto& c : j["cases"]) {
    DecoderCase k;
    k.name = c["name"];
    k.lora = c["lora"];
    k.file = c["file"];
    k.input_ids = c["input_ids"].get<std::vector<int32_t>>();
    k.steps = c["steps"];
    k.crosses_switch = k.name.rfind("cross_", 0) == 0;
    cases.push_back(k);
  }
  return cases;
}

void PrintTo(const DecoderCase& c, std::ostream* os) { *os << c.name; }

LoraMode LoraModeOf(const std::string& name) {
  if (name == "vision") return LoraMode::kVision;
  if (name == "speech") return LoraMode::kSpeech;
  return LoraMode::kNone;
}

void ExpectCloseRel(std::span<const float> got, std::span<const float> want, double rel_tol, const std::string& what,
                    double* worst) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 1e-6, err = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, static_cast<double>(std::fabs(want[i])));
    err = std::max(err, static_cast<double>(std::fabs(got[i] - want[i])));
  }
  if (worst != nullptr) *worst = std::max(*worst, err / scale);
  EXPECT_LE(err, rel_tol * scale) << what << ": max abs error " << err << " vs scale " << scale;
}

void ExpectStepLogits(const MemoryTap& tap, const std::map<std::string, TensorView>& ref,
                      std::span<const int64_t> live, int64_t steps, double rel_tol, const std::string& what,
                      double* worst, const std::string& ref_prefix) {
  for (int64_t k = 0; k < steps; ++k) {
    const std::string mine = k == 0 ? "prefill.logits" : "step." + std::to_string(k) + ".logits";
    const std::string theirs = ref_prefix + "step." + std::to_string(k) + ".logits";
    ASSERT_TRUE(tap.tensors.count(mine)) << what << ": no tap " << mine;
    ASSERT_TRUE(ref.count(theirs)) << what << ": no reference " << theirs;
    const std::vector<float>& logits = tap.tensors.at(mine).data;
    std::vector<float> at_live;
    std::vector<bool> is_live(logits.size(), false);
    for (int64_t id : live) {
      ASSERT_LT(static_cast<size_t>(id), logits.size());
      at_live.push_back(logits[static_cast<size_t>(id)]);
      is_live[static_cast<size_t>(id)] = true;
    }
    ExpectCloseRel(at_live, ToFloats(ref.at(theirs)), rel_tol, what + " step " + std::to_string(k) + " logits", worst);
    size_t nonzero_dead = 0;
    for (size_t i = 0; i < logits.size(); ++i)
      if (!is_live[i] && logits[i] != 0.0f) ++nonzero_dead;
    EXPECT_EQ(nonzero_dead, 0u) << what << " step " << k << ": logits of zero embedding rows must be exactly 0";
  }
}

}  // namespace phi4mm::test
