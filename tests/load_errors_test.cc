// Whole-folder loads of the tiny fixtures copied to a temp folder and then damaged (suite
// LoadErrors), loaded as the CLI loads them: missing, truncated and garbage files, tensors of the
// wrong shape, malformed JSON. Every one must give a Status with the right code and a message that
// names the file, tensor or value at fault, and must never crash. The parsers' own tests on
// hand-built inputs are in checkpoint_format_test.cc.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint_test_util.h"
#include "phi4mm/io/safetensors.h"
#include "phi4mm/runtime/model.h"
#include "test_util.h"

namespace phi4mm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::BuildSafetensors;
using test::CopyFixture;
using test::EditJson;
using test::ExpectError;
using test::Frame;
using test::kShard1;
using test::kShard2;
using test::LayoutHeader;
using test::RawTensor;
using test::ReadTensors;

void Truncate(const std::string& path, uintmax_t size) { fs::resize_file(path, size); }

// ---------------------------------------------------------------------------------------------
// LoadErrors: whole folders, damaged copies of the tiny fixtures, loaded as the CLI loads them.

TEST(LoadErrors, FixturesLoad) {
  for (const char* layout : {"orig", "native"}) {
    auto m = Model::Load(test::FixturePath(std::string("tiny/") + layout), LoadOptions{1});
    ASSERT_TRUE(m.ok()) << layout << ": " << m.status().ToString();
    EXPECT_EQ((*m)->context_length(), 512);
  }
}

TEST(LoadErrors, MissingFolder) {
  const std::string dir = test::TempDir("missing_folder") + "/no/such/model";
  auto m = Model::Load(dir);
  ExpectError(m.status(), StatusCode::kNotFound, {dir, "does not exist"});
}

TEST(LoadErrors, MissingConfigJson) {
  const std::string dir = CopyFixture("orig", "missing_config");
  fs::remove(dir + "/config.json");
  ExpectError(Model::Load(dir).status(), StatusCode::kNotFound, {dir, "config.json"});
}

TEST(LoadErrors, MissingShardListedInIndex) {
  const std::string dir = CopyFixture("orig", "missing_shard");
  fs::remove(dir + "/" + kShard2);
  ExpectError(Model::Load(dir).status(), StatusCode::kNotFound, {kShard2, "model.safetensors.index.json", "missing"});
}

TEST(LoadErrors, MissingModelSafetensors) {
  const std::string dir = CopyFixture("native", "missing_single");
  fs::remove(dir + "/model.safetensors");
  ExpectError(Model::Load(dir).status(), StatusCode::kNotFound, {dir, "model.safetensors"});
}

TEST(LoadErrors, MissingTokenizerJson) {
  const std::string dir = CopyFixture("native", "missing_tokenizer");
  fs::remove(dir + "/tokenizer.json");
  ExpectError(Model::Load(dir).status(), StatusCode::kNotFound, {"tokenizer.json"});
}

TEST(LoadErrors, ShardTruncatedInData) {
  const std::string dir = CopyFixture("orig", "trunc_data");
  const std::string shard = dir + "/" + kShard2;
  Truncate(shard, fs::file_size(shard) / 2);
  ExpectError(Model::Load(dir).status(), StatusCode::kDataLoss, {kShard2, "tensor '", "truncated"});
}

TEST(LoadErrors, ShardTruncatedInHeader) {
  const std::string dir = CopyFixture("orig", "trunc_header");
  Truncate(dir + "/" + kShard2, 100);
  ExpectError(Model::Load(dir).status(), StatusCode::kDataLoss, {kShard2, "only 92 bytes follow", "truncated"});
}

TEST(LoadErrors, ShardShorterThanHeaderLength) {
  const std::string dir = CopyFixture("orig", "trunc_tiny");
  Truncate(dir + "/" + kShard2, 5);
  ExpectError(Model::Load(dir).status(), StatusCode::kDataLoss, {kShard2, "5 bytes long", "truncated"});
}

TEST(LoadErrors, ShardEmpty) {
  const std::string dir = CopyFixture("native", "trunc_zero");
  Truncate(dir + "/model.safetensors", 0);
  ExpectError(Model::Load(dir).status(), StatusCode::kDataLoss, {"model.safetensors", "0 bytes long"});
}

TEST(LoadErrors, ShardWithGarbageHeader) {
  const std::string dir = CopyFixture("orig", "garbage_header");
  std::string bytes = test::ReadFile(dir + "/" + kShard2);
  for (size_t i = 8; i < 40; ++i) bytes[i] = '#';
  test::WriteFile(dir + "/" + kShard2, bytes);
  ExpectError(Model::Load(dir).status(), StatusCode::kDataLoss, {kShard2, "malformed JSON header"});
}

TEST(LoadErrors, ShardHeaderLengthLargerThanFile) {
  const std::string dir = CopyFixture("orig", "huge_header_len");
  std::string bytes = test::ReadFile(dir + "/" + kShard2);
  bytes[3] = '\x10';  // header length += 256 MiB... capped at 100 MB
  test::WriteFile(dir + "/" + kShard2, bytes);
  ExpectError(Model::Load(dir).status(), StatusCode::kDataLoss, {kShard2, "limit 100 MB"});
  bytes[3] = '\0';
  bytes[2] = '\x10';  // ~1 MiB, under the limit but past the end of the file
  test::WriteFile(dir + "/" + kShard2, bytes);
  ExpectError(Model::Load(dir).status(), StatusCode::kDataLoss, {kShard2, "bytes follow (truncated?)"});
}

TEST(LoadErrors, ShardHeaderOffsetsOutOfRange) {
  const std::string dir = CopyFixture("orig", "offsets");
  std::string data;
  json header = LayoutHeader(ReadTensors(dir + "/" + kShard1), &data);
  // model.norm.weight claims 1e9 more bytes than the data section holds (shape to match).
  json& norm = header["model.norm.weight"];
  norm["data_offsets"][1] = norm["data_offsets"][1].get<uint64_t>() + 1000000000;
  norm["shape"] = json::array({500000048});
  test::WriteFile(dir + "/" + kShard1, Frame(header.dump(), data));
  ExpectError(Model::Load(dir).status(), StatusCode::kDataLoss, {kShard1, "model.norm.weight", "outside"});
}

TEST(LoadErrors, ShardUnknownDtype) {
  const std::string dir = CopyFixture("orig", "dtype");
  std::vector<RawTensor> ts = ReadTensors(dir + "/" + kShard1);
  for (RawTensor& t : ts)
    if (t.name == "model.norm.weight") t.dtype = "Q4_K";
  test::WriteFile(dir + "/" + kShard1, BuildSafetensors(ts));
  ExpectError(Model::Load(dir).status(), StatusCode::kUnsupported, {kShard1, "model.norm.weight", "'Q4_K'"});
}

TEST(LoadErrors, TensorWithWrongShape) {
  const std::string dir = CopyFixture("orig", "wrong_shape");
  std::vector<RawTensor> ts = ReadTensors(dir + "/" + kShard1);
  bool found = false;
  for (RawTensor& t : ts)
    if (t.name == "model.norm.weight") {
      t.shape = {2, 24};  // same bytes, wrong shape
      found = true;
    }
  ASSERT_TRUE(found);
  test::WriteFile(dir + "/" + kShard1, BuildSafetensors(ts));
  ExpectError(Model::Load(dir).status(), StatusCode::kInvalidArgument, {"model.norm.weight", "[2, 24]", "[48]"});
}

TEST(LoadErrors, LoraTensorWithWrongShapeInPeftFolder) {
  const std::string dir = CopyFixture("native", "wrong_lora_shape");
  const std::string path = dir + "/vision-lora/adapter_model.safetensors";
  std::vector<RawTensor> ts = ReadTensors(path);
  const std::string target = "model.layers.1.self_attn.o_proj.lora_A.weight";
  bool found = false;
  for (RawTensor& t : ts)
    if (t.name == target) {
      t.shape = {t.shape[1], t.shape[0]};
      found = true;
    }
  ASSERT_TRUE(found);
  test::WriteFile(path, BuildSafetensors(ts));
  ExpectError(Model::Load(dir).status(), StatusCode::kInvalidArgument,
              {target, "vision-lora/adapter_model.safetensors", "[48, 4]", "[4, 48]"});
}

TEST(LoadErrors, MissingTensor) {
  const std::string dir = CopyFixture("orig", "missing_tensor");
  std::vector<RawTensor> ts = ReadTensors(dir + "/" + kShard1);
  std::erase_if(ts, [](const RawTensor& t) { return t.name == "model.norm.weight"; });
  test::WriteFile(dir + "/" + kShard1, BuildSafetensors(ts));
  // Still listed in the index: the index and the shard disagree.
  ExpectError(Model::Load(dir).status(), StatusCode::kDataLoss,
              {"model.safetensors.index.json", "model.norm.weight", kShard1});
  // Gone from the index too: the model itself notices.
  EditJson(dir + "/model.safetensors.index.json", [](json& j) { j["weight_map"].erase("model.norm.weight"); });
  ExpectError(Model::Load(dir).status(), StatusCode::kNotFound, {"model.norm.weight", dir});
}

TEST(LoadErrors, UnknownModelType) {
  const std::string dir = CopyFixture("orig", "llama");
  EditJson(dir + "/config.json", [](json& j) { j["model_type"] = "llama"; });
  ExpectError(Model::Load(dir).status(), StatusCode::kUnsupported, {"config.json", "'llama'"});
}

TEST(LoadErrors, MalformedConfigJson) {
  const std::string dir = CopyFixture("orig", "bad_config");
  test::WriteFile(dir + "/config.json", "{\"model_type\": \"phi4mm\", \"hidden_size\": 48,,}");
  ExpectError(Model::Load(dir).status(), StatusCode::kInvalidArgument, {dir + "/config.json", "malformed JSON"});
}

TEST(LoadErrors, MalformedGenerationConfig) {
  const std::string dir = CopyFixture("orig", "bad_gen");
  test::WriteFile(dir + "/generation_config.json", "{\"eos_token_id\": [200020, ");
  ExpectError(Model::Load(dir).status(), StatusCode::kInvalidArgument,
              {dir + "/generation_config.json", "malformed JSON"});
  test::WriteFile(dir + "/generation_config.json", "{\"eos_token_id\": \"end\"}");
  ExpectError(Model::Load(dir).status(), StatusCode::kInvalidArgument, {"generation_config.json", "'eos_token_id'"});
}

TEST(LoadErrors, MalformedIndexJson) {
  const std::string dir = CopyFixture("orig", "bad_index");
  test::WriteFile(dir + "/model.safetensors.index.json", "{\"weight_map\": {\"model.norm.weight\": ");
  ExpectError(Model::Load(dir).status(), StatusCode::kInvalidArgument,
              {dir + "/model.safetensors.index.json", "malformed JSON"});
}

TEST(LoadErrors, MalformedTokenizerJson) {
  const std::string dir = CopyFixture("orig", "bad_tokenizer");
  const std::string full = test::ReadFile(dir + "/tokenizer.json");
  test::WriteFile(dir + "/tokenizer.json", full.substr(0, full.size() / 3));
  ExpectError(Model::Load(dir).status(), StatusCode::kInvalidArgument, {dir + "/tokenizer.json", "not valid JSON"});
}

TEST(LoadErrors, MalformedAdapterConfig) {
  const std::string dir = CopyFixture("native", "bad_adapter");
  test::WriteFile(dir + "/speech-lora/adapter_config.json", "{\"r\": 6, \"lora_alpha\": }");
  ExpectError(Model::Load(dir).status(), StatusCode::kInvalidArgument, {"speech-lora/adapter_config.json", "malformed JSON"});
  test::WriteFile(dir + "/speech-lora/adapter_config.json", "{\"r\": 0, \"lora_alpha\": 3}");
  ExpectError(Model::Load(dir).status(), StatusCode::kInvalidArgument, {"speech-lora/adapter_config.json", "'r'"});
}

TEST(LoadErrors, InconsistentConfigValues) {
  const std::string dir = CopyFixture("orig", "inconsistent");
  const std::string cfg = dir + "/config.json";
  const std::string original = test::ReadFile(cfg);
  EditJson(cfg, [](json& j) { j["num_key_value_heads"] = 4; });
  ExpectError(Model::Load(dir).status(), StatusCode::kInvalidArgument, {cfg, "num_key_value_heads (4)"});

  test::WriteFile(cfg, original);
  EditJson(cfg, [](json& j) { j["partial_rotary_factor"] = 0.625; });
  ExpectError(Model::Load(dir).status(), StatusCode::kInvalidArgument, {cfg, "= 5", "even"});

  test::WriteFile(cfg, original);
  EditJson(cfg, [](json& j) { j["rope_scaling"]["long_factor"] = {1.0, 2.0, 3.0, 4.0}; });
  ExpectError(Model::Load(dir).status(), StatusCode::kInvalidArgument, {cfg, "long_factor", "3 and 4"});

  test::WriteFile(cfg, original);
  EditJson(cfg, [](json& j) { j["num_hidden_layers"] = 0; });
  ExpectError(Model::Load(dir).status(), StatusCode::kInvalidArgument, {cfg, "'num_hidden_layers' must be positive"});

  test::WriteFile(cfg, original);
  ASSERT_TRUE(Model::Load(dir).ok());
}

}  // namespace
}  // namespace phi4mm
