// Pre-quantized checkpoints (suite Quantize): the tiny fixture of each layout is quantized into a
// temporary folder (in-process as `phi4mm quantize` does it, and once through the CLI), loaded
// back, and must give bit-identical logits to converting at load with the same mode while
// converting nothing itself; mode mismatches, corrupted metadata and the safetensors writer's
// alignment and padding are checked too.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "phi4mm/io/prequantized.h"
#include "phi4mm/io/safetensors_writer.h"
#include "phi4mm/runtime/session.h"
#include "test_util.h"

namespace phi4mm {
namespace {

namespace fs = std::filesystem;

// Fresh temporary folders, removed when the test binary ends (each quantized fixture is ~20 MB).
std::vector<std::string>& Created() {
  static std::vector<std::string> dirs;
  return dirs;
}
std::string Temp(const std::string& name) {
  Created().push_back(test::TempDir(name));
  return Created().back();
}
class RemoveTempDirs : public ::testing::Environment {
 public:
  void TearDown() override {
    std::error_code ec;
    for (const std::string& d : Created()) fs::remove_all(d, ec);
  }
};
const auto* const kRemoveTempDirs = ::testing::AddGlobalTestEnvironment(new RemoveTempDirs);

// What `phi4mm quantize` does: load every part converted, then write what was converted, marked as
// written in mode `label` (default: `mode`'s own name).
Status Quantize(const std::string& in, const std::string& out, QuantMode mode, const char* label = nullptr) {
  ConversionLog log;
  LoadOptions opts;
  opts.num_threads = 2;
  opts.quant = mode;
  opts.conversion_log = &log;
  PHI4MM_ASSIGN_OR_RETURN(auto model, Model::Load(in, opts));
  PHI4MM_RETURN_IF_ERROR(model->vision().status());
  PHI4MM_RETURN_IF_ERROR(model->speech().status());
  return WritePrequantizedCheckpoint(model->checkpoint(), log, label ? label : QuantModeName(mode), out).status();
}

std::shared_ptr<const Model> Load(const std::string& dir, QuantMode mode, ConversionLog* log = nullptr) {
  LoadOptions opts;
  opts.num_threads = 2;
  opts.quant = mode;
  opts.conversion_log = log;
  auto m = Model::Load(dir, opts);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? *m : nullptr;
}

// Logits after a short prompt and after each of `steps` greedy decode steps, in every LoRA mode.
std::vector<std::vector<float>> Logits(const std::shared_ptr<const Model>& model, int steps = 3) {
  std::vector<std::vector<float>> all;
  const std::vector<int32_t> prompt = {200022, 1595, 382, 261, 1746, 200020, 200019};
  for (LoraMode mode : {LoraMode::kNone, LoraMode::kVision, LoraMode::kSpeech}) {
    Session s(model);
    Status st = s.Append(prompt, mode);
    EXPECT_TRUE(st.ok()) << st.ToString();
    for (int k = 0; st.ok() && k <= steps; ++k) {
      all.push_back(s.logits());
      const auto& l = s.logits();
      const int32_t next = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
      const std::vector<int32_t> one = {next};
      st = s.Append(one, mode);
      EXPECT_TRUE(st.ok()) << st.ToString();
    }
  }
  return all;
}

class QuantizeLayout : public ::testing::TestWithParam<std::tuple<std::string, QuantMode>> {};

TEST_P(QuantizeLayout, LoadsWithoutConvertingAndMatchesLoadTimeQuantization) {
  const auto& [layout, mode] = GetParam();
  const std::string in = test::FixturePath("tiny/" + layout);
  const std::string out = Temp(std::string("quantized_") + layout + "_" + QuantModeName(mode));
  Status st = Quantize(in, out, mode);
  ASSERT_TRUE(st.ok()) << st.ToString();

  ConversionLog second;
  auto pre = Load(out, mode, &second);
  ASSERT_NE(pre, nullptr);
  ASSERT_TRUE(pre->vision().ok());
  ASSERT_TRUE(pre->speech().ok());
  EXPECT_TRUE(second.entries().empty()) << second.entries().size() << " tensors converted again, e.g. "
                                        << second.entries().begin()->first;
  EXPECT_EQ(pre->checkpoint().prequantized(), QuantModeName(mode));
  int packed = 0;
  for (const auto& [name, t] : pre->checkpoint().tensors()) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % 64, 0u) << name << " is not 64-byte aligned";
    packed += t.packed ? 1 : 0;
  }
  if (mode != QuantMode::kBF16) {  // the fixture is bf16 already
    EXPECT_GT(packed, 0);
  }

  // The head is held in the layout the active table's tile reads after a load-time conversion and
  // from the folder; a model loaded with a ConversionLog (to be written) keeps the file's rows.
  auto converted = Load(in, mode);
  ASSERT_NE(converted, nullptr);
  auto plain = Load(out, mode);
  ASSERT_NE(plain, nullptr);
  for (const auto* m : {&plain->decoder().lm_head(), &converted->decoder().lm_head()}) {
    EXPECT_EQ(m->layout(), ActiveKernels().layout[static_cast<int>(m->format())]) << WeightFormatName(m->format());
  }
  EXPECT_EQ(pre->decoder().lm_head().layout(), WeightLayout::kRows);
  const auto want = Logits(converted), got = Logits(pre);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(got[i] == want[i]) << "logits " << i << " differ";
  }
  // Without --quant (none = as stored) the folder runs in the mode it was written with.
  const auto as_stored = Logits(Load(out, QuantMode::kNone));
  for (size_t i = 0; i < as_stored.size() && i < want.size(); ++i) {
    EXPECT_TRUE(as_stored[i] == want[i]) << "logits " << i << " differ when loaded as stored";
  }

  // Every non-weight file came along.
  for (const auto& e : fs::recursive_directory_iterator(in)) {
    if (e.is_regular_file()) {
      EXPECT_TRUE(fs::exists(out / e.path().lexically_relative(in))) << e.path();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Quantize, QuantizeLayout,
                         ::testing::Values(std::make_tuple("orig", QuantMode::kQ4),
                                           std::make_tuple("native", QuantMode::kQ4),
                                           std::make_tuple("native", QuantMode::kQ4M),
                                           std::make_tuple("orig", QuantMode::kQ8),
                                           std::make_tuple("native", QuantMode::kBF16)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + QuantModeName(std::get<1>(info.param));
                         });

// One quantized fixture per layout for the error tests.
const std::string& QuantizedQ4(const std::string& layout) {
  static std::map<std::string, std::string> dirs;
  auto& d = dirs[layout];
  if (d.empty()) {
    d = Temp("quantized_q4_shared_" + layout);
    Status st = Quantize(test::FixturePath("tiny/" + layout), d, QuantMode::kQ4);
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  return d;
}

TEST(Quantize, OtherModeIsAnErrorNamingTheFolderMode) {
  auto m = Model::Load(QuantizedQ4("native"), LoadOptions{1, QuantMode::kQ8});
  ASSERT_FALSE(m.ok());
  const std::string msg = m.status().ToString();
  EXPECT_NE(msg.find("--quant q4"), std::string::npos) << msg;
  EXPECT_NE(msg.find("q8_0 was requested"), std::string::npos) << msg;
}

// A folder an earlier phi4mm wrote under q4 holds 8-bit adapters (today's q4 stores them as Q4_K): loaded
// with --quant q4, its own mode, it runs as stored; another mode is still refused. The old folder is
// made by labelling a q4m conversion (8-bit adapters) as q4.
TEST(Quantize, OwnModeKeepsTensorsAnEarlierPolicyStored) {
  const std::string old_q4 = Temp("quantized_old_q4");
  Status st = Quantize(test::FixturePath("tiny/native"), old_q4, QuantMode::kQ4M, "q4");
  ASSERT_TRUE(st.ok()) << st.ToString();

  auto own = Load(old_q4, QuantMode::kQ4);
  ASSERT_NE(own, nullptr);
  const LoraAdapter* ad = own->decoder().layers()[0].qkv.adapter(LoraMode::kVision);
  ASSERT_NE(ad, nullptr);
  EXPECT_EQ(ad->a.format(), WeightFormat::kQ8_0);
  EXPECT_EQ(ad->b.format(), WeightFormat::kQ8_0);
  EXPECT_TRUE(Logits(own, 1) == Logits(Load(old_q4, QuantMode::kNone), 1));

  auto other = Model::Load(old_q4, LoadOptions{1, QuantMode::kQ8});
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().ToString().find("--quant q4 "), std::string::npos) << other.status().ToString();
}

TEST(Quantize, QuantizingAQuantizedFolderAgainCopiesIt) {
  const std::string again = Temp("quantized_again");
  Status st = Quantize(QuantizedQ4("orig"), again, QuantMode::kQ4);
  ASSERT_TRUE(st.ok()) << st.ToString();
  auto a = Load(again, QuantMode::kQ4), b = Load(QuantizedQ4("orig"), QuantMode::kQ4);
  ASSERT_TRUE(a && b);
  EXPECT_TRUE(Logits(a, 1) == Logits(b, 1));
  EXPECT_FALSE(Quantize(QuantizedQ4("orig"), QuantizedQ4("orig") + "/inner", QuantMode::kQ4).ok());
}

// Replaces the first `from` in `path` by `to` (same length, so the header length stays right).
void Patch(const std::string& path, const std::string& from, const std::string& to) {
  ASSERT_EQ(from.size(), to.size());
  std::string bytes = test::ReadFile(path);
  const size_t pos = bytes.find(from);
  ASSERT_NE(pos, std::string::npos) << from << " not in " << path;
  bytes.replace(pos, from.size(), to);
  test::WriteFile(path, bytes);
}

std::string CorruptedCopy(const std::string& name, const std::string& from, const std::string& to) {
  const std::string dir = Temp("quantized_corrupt_" + name);
  test::CopyDir(QuantizedQ4("native"), dir);
  Patch(dir + "/model.safetensors", from, to);
  return dir;
}

void ExpectLoadError(const std::string& dir, std::initializer_list<std::string> parts) {
  auto m = Model::Load(dir, LoadOptions{1, QuantMode::kNone});
  ASSERT_FALSE(m.ok()) << dir;
  const std::string msg = m.status().ToString();
  for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << msg;
}

TEST(Quantize, CorruptedMetadataIsAClearError) {
  ExpectLoadError(CorruptedCopy("format", "\\\"format\\\":\\\"q4_k\\\"", "\\\"format\\\":\\\"q9_k\\\""),
                  {"q9_k", "does not know"});
  ExpectLoadError(CorruptedCopy("marker", "phi4mm-prequantized", "phi4mm-prequantizex"),
                  {"phi4mm.format", "re-run phi4mm quantize"});
  const std::string version = std::string("\"phi4mm.version\":\"") + kPackedVersion + "\"";
  ExpectLoadError(CorruptedCopy("version", version, "\"phi4mm.version\":\"7\""), {"format version '7'"});
  // A folder written before the interleaved Q4_K block order (version 1) asks to be re-quantized.
  ExpectLoadError(CorruptedCopy("version_1", version, "\"phi4mm.version\":\"1\""),
                  {"format version '1'", "quantize the original checkpoint again"});
  ExpectLoadError(CorruptedCopy("json", "\\\"rows\\\":", "\\\"rows\\\"]"), {"not valid JSON"});
  ExpectLoadError(CorruptedCopy("cols", "\\\"cols\\\":", "\\\"colz\\\":"), {"format, shape, rows and cols"});
}

TEST(Quantize, WriterAlignsEveryTensorAndReaderHidesThePadding) {
  const std::string dir = Temp("writer");
  const std::vector<uint8_t> a(3, 7), b(10, 9);
  std::vector<TensorToWrite> ts = {{"a", DType::kU8, {3}, a.data(), 3}, {"b", DType::kBF16, {5}, b.data(), 10}};
  auto n = WriteSafetensors(dir + "/plain.safetensors", ts, {{"format", "pt"}});
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  auto plain = SafetensorsFile::Open(dir + "/plain.safetensors");
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(plain->tensors().size(), 3u);  // an unmarked file shows the padding as a tensor
  EXPECT_EQ(reinterpret_cast<uintptr_t>(plain->tensors().at("b").data) % 64, 0u);

  std::map<std::string, std::string> md = {{kPackedFormatKey, kPackedFormatValue},
                                           {kPackedVersionKey, kPackedVersion},
                                           {kPackedQuantKey, "q8"}};
  md[std::string(kPackedTensorKeyPrefix) + "a"] = R"({"format":"q8_0","shape":[1,3],"rows":1,"cols":3})";
  ts[0].shape = {1, 3};
  ASSERT_TRUE(WriteSafetensors(dir + "/marked.safetensors", ts, md).ok());
  auto marked = SafetensorsFile::Open(dir + "/marked.safetensors");
  ASSERT_TRUE(marked.ok()) << marked.status().ToString();
  ASSERT_EQ(marked->tensors().size(), 2u);
  EXPECT_EQ(marked->packed_quant(), "q8");
  ASSERT_TRUE(marked->tensors().at("a").packed.has_value());
  EXPECT_EQ(marked->tensors().at("a").LogicalShape(), (std::vector<int64_t>{1, 3}));

  md[std::string(kPackedTensorKeyPrefix) + "missing"] = md[std::string(kPackedTensorKeyPrefix) + "a"];
  ASSERT_TRUE(WriteSafetensors(dir + "/bad.safetensors", ts, md).ok());
  auto bad = SafetensorsFile::Open(dir + "/bad.safetensors");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().ToString().find("'missing'"), std::string::npos) << bad.status().ToString();
}

int Sh(const std::string& cmd) {
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

TEST(Quantize, CommandLine) {
  const std::string dir = Temp("quantize_cli");
  const std::string out = dir + "/q8", log = dir + "/log";
  const std::string cli = std::string(PHI4MM_CLI_PATH);
  const std::string orig = test::FixturePath("tiny/orig");
  ASSERT_EQ(Sh(cli + " quantize -m " + orig + " -o " + out + " --quant q8 -t 2 >" + log + " 2>&1"), 0)
      << test::ReadFile(log);
  EXPECT_NE(test::ReadFile(log).find("tensors stored converted"), std::string::npos) << test::ReadFile(log);
  EXPECT_EQ(Sh(cli + " quantize -m " + orig + " -o " + out + " --quant q8 >" + log + " 2>&1"), 1);
  EXPECT_NE(test::ReadFile(log).find("--force"), std::string::npos) << test::ReadFile(log);
  EXPECT_EQ(Sh(cli + " quantize -m " + orig + " -o " + out + " --quant q8 --force >" + log + " 2>&1"), 0)
      << test::ReadFile(log);

  ASSERT_EQ(Sh(cli + " info -m " + out + " --json >" + log + " 2>&1"), 0) << test::ReadFile(log);
  const auto j = nlohmann::json::parse(test::ReadFile(log));
  EXPECT_EQ(j["prequantized"]["quant"], "q8");
  EXPECT_GT(j["prequantized"]["tensors"].get<int>(), 0);
  ASSERT_EQ(Sh(cli + " info -m " + out + " >" + log + " 2>&1"), 0) << test::ReadFile(log);
  EXPECT_NE(test::ReadFile(log).find("pre-quantized by phi4mm quantize --quant q8"), std::string::npos)
      << test::ReadFile(log);

  EXPECT_EQ(Sh(cli + " run -m " + out + " --quant q4 -p hi -n 2 >" + log + " 2>&1"), 1);
  EXPECT_NE(test::ReadFile(log).find("--quant q8"), std::string::npos) << test::ReadFile(log);
  EXPECT_EQ(Sh(cli + " run -m " + out + " -p hi -n 2 >" + log + " 2>&1"), 0) << test::ReadFile(log);
}

}  // namespace
}  // namespace phi4mm
