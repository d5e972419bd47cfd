// Unit and error-path tests of what reads a checkpoint's files, on hand-built inputs: the
// safetensors parser (suite Safetensors; the 16-bit float conversions are in half_test.cc), the
// original/PEFT -> canonical tensor renaming of reference-spec §8.1 (Checkpoint), and config.json
// parsing and validation (Config). Whole-folder loads of damaged fixtures are in load_errors_test.cc.
// Every bad input must give a Status with the right code and a message that names the file, tensor
// or value at fault, and must never crash.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint_test_util.h"
#include "phi4mm/io/checkpoint.h"
#include "phi4mm/io/model_config.h"
#include "phi4mm/io/safetensors.h"
#include "phi4mm/runtime/model.h"
#include "test_util.h"

namespace phi4mm {
namespace {

using nlohmann::json;
using test::BuildSafetensors;
using test::CopyFixture;
using test::EditJson;
using test::ExpectError;
using test::Frame;
using test::kShard1;
using test::kShard2;
using test::RawTensor;
using test::ReadTensors;

template <typename T>
std::string Bytes(std::initializer_list<T> values) {
  std::string s;
  for (T v : values) {
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    s.append(b, sizeof(T));
  }
  return s;
}

Result<SafetensorsFile> ParseBuffer(const std::string& buf, const std::string& label = "buf.safetensors") {
  return SafetensorsFile::Parse(nullptr, reinterpret_cast<const uint8_t*>(buf.data()), buf.size(), label);
}

// A header-only safetensors buffer with one tensor entry `entry` and `data_bytes` bytes of data.
std::string OneEntry(const json& entry, size_t data_bytes = 16) {
  return Frame(json{{"t", entry}}.dump(), std::string(data_bytes, '\x01'));
}

// ---------------------------------------------------------------------------------------------
// Safetensors: the parser on hand-built buffers.

TEST(Safetensors, ParsesValidFileWithAllCommonDtypes) {
  const std::string f32 = Bytes<float>({1.5f, -2.0f, 3.25f, 0.0f, 1e-3f, 7.0f});
  const std::string bf16 = Bytes<uint16_t>({0x3f80, 0xc000});         // 1, -2
  const std::string f16 = Bytes<uint16_t>({0x3c00, 0x4200, 0xbc00});  // 1, 3, -1
  const std::string i64 = Bytes<int64_t>({7, -9, 200020});
  const std::string buf = BuildSafetensors({{"a.f32", "F32", {2, 3}, f32},
                                            {"b.bf16", "BF16", {2}, bf16},
                                            {"c.f16", "F16", {3, 1}, f16},
                                            {"d.i64", "I64", {3}, i64},
                                            {"e.empty", "F32", {0, 5}, ""}},
                                           json{{"format", "pt"}, {"origin", "test"}});
  auto r = ParseBuffer(buf, "valid.safetensors");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->path(), "valid.safetensors");
  ASSERT_EQ(r->tensors().size(), 5u);
  EXPECT_EQ(r->metadata().at("format"), "pt");
  EXPECT_EQ(r->metadata().at("origin"), "test");
  EXPECT_EQ(r->tensors().count("__metadata__"), 0u);

  const TensorView& a = r->tensors().at("a.f32");
  EXPECT_EQ(a.dtype, DType::kF32);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a.numel(), 6);
  EXPECT_EQ(a.nbytes, 24u);
  EXPECT_EQ(a.ShapeString(), "[2, 3]");
  EXPECT_EQ(a.file, "valid.safetensors");
  EXPECT_EQ(test::ToFloats(a), (std::vector<float>{1.5f, -2.0f, 3.25f, 0.0f, 1e-3f, 7.0f}));

  const TensorView& b = r->tensors().at("b.bf16");
  EXPECT_EQ(b.dtype, DType::kBF16);
  EXPECT_EQ(test::ToFloats(b), (std::vector<float>{1.0f, -2.0f}));
  const TensorView& c = r->tensors().at("c.f16");
  EXPECT_EQ(c.dtype, DType::kF16);
  EXPECT_EQ(c.shape, (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(test::ToFloats(c), (std::vector<float>{1.0f, 3.0f, -1.0f}));
  const TensorView& d = r->tensors().at("d.i64");
  EXPECT_EQ(d.dtype, DType::kI64);
  EXPECT_EQ(test::ToInts(d), (std::vector<int64_t>{7, -9, 200020}));
  const TensorView& e = r->tensors().at("e.empty");
  EXPECT_EQ(e.numel(), 0);
  EXPECT_EQ(e.nbytes, 0u);
  EXPECT_EQ(e.ShapeString(), "[0, 5]");
}

TEST(Safetensors, ScalarAndEmptyHeader) {
  const std::string buf = BuildSafetensors({{"s", "F64", {}, Bytes<double>({2.5})}});  // views point into it
  auto r = ParseBuffer(buf);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const TensorView& s = r->tensors().at("s");
  EXPECT_TRUE(s.shape.empty());
  EXPECT_EQ(s.numel(), 1);
  EXPECT_EQ(s.ShapeString(), "[]");
  double v;
  std::memcpy(&v, s.data, 8);
  EXPECT_EQ(v, 2.5);

  auto empty = ParseBuffer(Frame("{}", ""));
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_TRUE(empty->tensors().empty());
}

TEST(Safetensors, OpenReadsFileAndNamesItInErrors) {
  const std::string dir = test::TempDir("st_open");
  const std::string good = dir + "/good.safetensors";
  test::WriteFile(good, BuildSafetensors({{"w", "F32", {2}, Bytes<float>({4.0f, 5.0f})}}));
  auto r = SafetensorsFile::Open(good);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(test::ToFloats(r->tensors().at("w")), (std::vector<float>{4.0f, 5.0f}));
  EXPECT_EQ(r->tensors().at("w").file, good);

  ExpectError(SafetensorsFile::Open(dir + "/absent.safetensors").status(), StatusCode::kNotFound,
              {"absent.safetensors", "does not exist"});
  ExpectError(SafetensorsFile::Open(dir).status(), StatusCode::kInvalidArgument, {dir, "not a regular file"});
}

TEST(Safetensors, TooShortForHeaderLength) {
  for (size_t n : {0u, 1u, 7u}) {
    const std::string buf(n, '\0');
    ExpectError(ParseBuffer(buf, "short.safetensors").status(), StatusCode::kDataLoss,
                {"short.safetensors", std::to_string(n) + " bytes long", "truncated"});
  }
}

TEST(Safetensors, HeaderLengthBeyondFile) {
  std::string buf = BuildSafetensors({{"w", "F32", {4}, std::string(16, '\0')}});
  const std::string cut = buf.substr(0, 20);  // header length intact, header itself cut
  ExpectError(ParseBuffer(cut, "cut.safetensors").status(), StatusCode::kDataLoss,
              {"cut.safetensors", "only 12 bytes follow", "truncated"});
  std::string huge = Frame("{}", "");
  huge[7] = '\x7f';
  ExpectError(ParseBuffer(huge).status(), StatusCode::kDataLoss, {"limit 100 MB"});
  std::string just_over = Frame("{}", "");
  just_over[0] = 3;  // declares 3 bytes, 2 follow
  ExpectError(ParseBuffer(just_over).status(), StatusCode::kDataLoss, {"3-byte header but only 2 bytes follow"});
}

TEST(Safetensors, MalformedHeaderJson) {
  ExpectError(ParseBuffer(Frame("{\"w\": {\"dtype\": ", ""), "garbage.safetensors").status(), StatusCode::kDataLoss,
              {"garbage.safetensors", "malformed JSON header"});
  // Bytes that are not UTF-8, a NUL among them (a std::string_view literal keeps it).
  using namespace std::string_view_literals;
  ExpectError(ParseBuffer(Frame(std::string("\xff\xfe\x00garbage"sv), "")).status(), StatusCode::kDataLoss,
              {"malformed JSON header"});
  ExpectError(ParseBuffer(Frame("[1, 2]", "")).status(), StatusCode::kDataLoss, {"not an object"});
  ExpectError(ParseBuffer(Frame(R"({"__metadata__": [1]})", "")).status(), StatusCode::kDataLoss,
              {"__metadata__ is not an object"});
  ExpectError(ParseBuffer(Frame(R"({"w": 3})", "")).status(), StatusCode::kDataLoss,
              {"tensor 'w'", "dtype, shape and data_offsets"});
  ExpectError(ParseBuffer(Frame(R"({"w": {"dtype": "F32", "shape": [1]}})", "")).status(), StatusCode::kDataLoss,
              {"tensor 'w'", "data_offsets"});
}

TEST(Safetensors, OffsetsOutOfRange) {
  ExpectError(ParseBuffer(OneEntry({{"dtype", "F32"}, {"shape", {8}}, {"data_offsets", {0, 32}}}, 16)).status(),
              StatusCode::kDataLoss, {"tensor 't'", "[0, 32]", "16-byte data section"});
  ExpectError(ParseBuffer(OneEntry({{"dtype", "F32"}, {"shape", {0}}, {"data_offsets", {8, 4}}}, 16)).status(),
              StatusCode::kDataLoss, {"tensor 't'", "[8, 4]"});
  ExpectError(ParseBuffer(OneEntry({{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {-4, 0}}}, 16)).status(),
              StatusCode::kDataLoss, {"tensor 't'", "data_offsets must be two non-negative integers"});
  ExpectError(ParseBuffer(OneEntry({{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {0}}}, 16)).status(),
              StatusCode::kDataLoss, {"tensor 't'", "data_offsets"});
  ExpectError(
      ParseBuffer(OneEntry({{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {0, 18446744073709551615ull}}}, 16))
          .status(),
      StatusCode::kDataLoss, {"tensor 't'", "outside"});
}

TEST(Safetensors, OverlappingTensors) {
  const json header = {{"a", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}}},
                       {"b", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {4, 12}}}}};
  ExpectError(ParseBuffer(Frame(header.dump(), std::string(16, '\0')), "overlap.safetensors").status(),
              StatusCode::kDataLoss, {"overlap.safetensors", "overlap"});
  // Touching but not overlapping is fine.
  const json touching = {{"a", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}}},
                         {"b", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {8, 16}}}}};
  EXPECT_TRUE(ParseBuffer(Frame(touching.dump(), std::string(16, '\0'))).ok());
}

TEST(Safetensors, DtypeShapeByteCountMismatch) {
  ExpectError(ParseBuffer(OneEntry({{"dtype", "BF16"}, {"shape", {2, 3}}, {"data_offsets", {0, 16}}}, 16)).status(),
              StatusCode::kDataLoss, {"tensor 't'", "[2, 3]", "BF16", "needs 12 bytes", "span 16"});
  ExpectError(
      ParseBuffer(
          OneEntry({{"dtype", "F32"}, {"shape", {1u << 30, 1u << 30, 1u << 30}}, {"data_offsets", {0, 16}}}, 16))
          .status(),
      StatusCode::kDataLoss, {"tensor 't'", "absurdly large"});
}

TEST(Safetensors, UnknownDtype) {
  ExpectError(ParseBuffer(OneEntry({{"dtype", "F8_E9M9"}, {"shape", {4}}, {"data_offsets", {0, 4}}})).status(),
              StatusCode::kUnsupported, {"tensor 't'", "unsupported dtype 'F8_E9M9'"});
  ExpectError(ParseBuffer(OneEntry({{"dtype", 32}, {"shape", {4}}, {"data_offsets", {0, 16}}})).status(),
              StatusCode::kDataLoss, {"tensor 't'", "dtype is not a string"});
}

TEST(Safetensors, BadDimensions) {
  for (const json& shape : {json::array({2, -2}), json::array({1.5}), json::array({"4"}), json::array({nullptr})}) {
    ExpectError(ParseBuffer(OneEntry({{"dtype", "U8"}, {"shape", shape}, {"data_offsets", {0, 4}}})).status(),
                StatusCode::kDataLoss, {"tensor 't'", "non-integer or negative dimension"});
  }
  ExpectError(ParseBuffer(OneEntry({{"dtype", "U8"}, {"shape", 4}, {"data_offsets", {0, 4}}})).status(),
              StatusCode::kDataLoss, {"tensor 't'", "shape is not an array"});
}

// ---------------------------------------------------------------------------------------------
// Checkpoint: canonical names (reference-spec §8.1) and checkpoint-level errors.

TEST(Checkpoint, CanonicalNameFromOriginalAllRules) {
  const std::string X = "model.embed_tokens_extend.";
  const std::vector<std::pair<std::string, std::string>> cases = {
      // decoder: .base_layer. dropped, LoRA names kept
      {"model.layers.0.self_attn.qkv_proj.base_layer.weight", "model.layers.0.self_attn.qkv_proj.weight"},
      {"model.layers.31.self_attn.o_proj.base_layer.weight", "model.layers.31.self_attn.o_proj.weight"},
      {"model.layers.2.mlp.gate_up_proj.base_layer.weight", "model.layers.2.mlp.gate_up_proj.weight"},
      {"model.layers.2.mlp.down_proj.base_layer.weight", "model.layers.2.mlp.down_proj.weight"},
      {"model.layers.1.self_attn.qkv_proj.lora_A.vision.weight",
       "model.layers.1.self_attn.qkv_proj.lora_A.vision.weight"},
      {"model.layers.1.mlp.down_proj.lora_B.speech.weight", "model.layers.1.mlp.down_proj.lora_B.speech.weight"},
      // vision projection and separators
      {X + "image_embed.img_projection.0.weight", X + "image_embed.img_projection_up.weight"},
      {X + "image_embed.img_projection.0.bias", X + "image_embed.img_projection_up.bias"},
      {X + "image_embed.img_projection.2.weight", X + "image_embed.img_projection_down.weight"},
      {X + "image_embed.img_projection.2.bias", X + "image_embed.img_projection_down.bias"},
      {X + "image_embed.glb_GN", X + "image_embed.global_img_feature_extensor"},
      {X + "image_embed.sub_GN", X + "image_embed.sub_img_feature_extensor"},
      // audio projections
      {X + "audio_embed.audio_projection.speech.0.weight", X + "audio_embed.up_proj_for_speech.weight"},
      {X + "audio_embed.audio_projection.speech.0.bias", X + "audio_embed.up_proj_for_speech.bias"},
      {X + "audio_embed.audio_projection.speech.2.weight", X + "audio_embed.down_proj_for_speech.weight"},
      {X + "audio_embed.audio_projection.speech.2.bias", X + "audio_embed.down_proj_for_speech.bias"},
      {X + "audio_embed.audio_projection.vision.0.weight", X + "audio_embed.up_proj_for_vision_speech.weight"},
      {X + "audio_embed.audio_projection.vision.0.bias", X + "audio_embed.up_proj_for_vision_speech.bias"},
      {X + "audio_embed.audio_projection.vision.2.weight", X + "audio_embed.down_proj_for_vision_speech.weight"},
      {X + "audio_embed.audio_projection.vision.2.bias", X + "audio_embed.down_proj_for_vision_speech.bias"},
      // conformer feed-forwards and attention
      {X + "audio_embed.encoder.encoders.0.feed_forward_in.net.0.linear.weight",
       X + "audio_embed.encoder.encoders.0.feed_forward_in.gate_up_proj.weight"},
      {X + "audio_embed.encoder.encoders.23.feed_forward_out.net.0.linear.bias",
       X + "audio_embed.encoder.encoders.23.feed_forward_out.gate_up_proj.bias"},
      {X + "audio_embed.encoder.encoders.5.feed_forward_in.net.2.weight",
       X + "audio_embed.encoder.encoders.5.feed_forward_in.down_proj.weight"},
      {X + "audio_embed.encoder.encoders.5.feed_forward_out.net.2.bias",
       X + "audio_embed.encoder.encoders.5.feed_forward_out.down_proj.bias"},
      {X + "audio_embed.encoder.encoders.1.self_attn.linear_q.weight",
       X + "audio_embed.encoder.encoders.1.self_attn.q_proj.weight"},
      {X + "audio_embed.encoder.encoders.1.self_attn.linear_k.bias",
       X + "audio_embed.encoder.encoders.1.self_attn.k_proj.bias"},
      {X + "audio_embed.encoder.encoders.1.self_attn.linear_v.weight",
       X + "audio_embed.encoder.encoders.1.self_attn.v_proj.weight"},
      {X + "audio_embed.encoder.encoders.1.self_attn.linear_out.bias",
       X + "audio_embed.encoder.encoders.1.self_attn.o_proj.bias"},
      // names that keep their name
      {"model.embed_tokens.weight", "model.embed_tokens.weight"},
      {"model.norm.weight", "model.norm.weight"},
      {"lm_head.weight", "lm_head.weight"},
      {X + "image_embed.img_processor.encoder.layers.0.mlp.fc1.weight",
       X + "image_embed.img_processor.encoder.layers.0.mlp.fc1.weight"},
      {X + "audio_embed.encoder.encoder_embedding.global_mean",
       X + "audio_embed.encoder.encoder_embedding.global_mean"},
      {X + "audio_embed.encoder.embed.conv.0.weight", X + "audio_embed.encoder.embed.conv.0.weight"},
      {X + "audio_embed.encoder.encoders.0.conv.glu.b1", X + "audio_embed.encoder.encoders.0.conv.glu.b1"},
      {X + "audio_embed.encoder.encoders.0.self_attn.relative_attention_bias_layer.bias_values.weight",
       X + "audio_embed.encoder.encoders.0.self_attn.relative_attention_bias_layer.bias_values.weight"},
  };
  for (const auto& [from, to] : cases) {
    EXPECT_EQ(CanonicalNameFromOriginal(from), to) << from;
    EXPECT_EQ(CanonicalNameFromOriginal(to), to) << "not idempotent on " << to;
  }
}

TEST(Checkpoint, CanonicalNameFromPeft) {
  EXPECT_EQ(CanonicalNameFromPeft("base_model.model.model.layers.0.self_attn.qkv_proj.lora_A.weight", "vision"),
            "model.layers.0.self_attn.qkv_proj.lora_A.vision.weight");
  EXPECT_EQ(CanonicalNameFromPeft("base_model.model.model.layers.3.mlp.down_proj.lora_B.weight", "speech"),
            "model.layers.3.mlp.down_proj.lora_B.speech.weight");
  EXPECT_EQ(CanonicalNameFromPeft("model.layers.1.mlp.gate_up_proj.lora_A.weight", "speech"),
            "model.layers.1.mlp.gate_up_proj.lora_A.speech.weight");
  EXPECT_EQ(CanonicalNameFromPeft("base_model.model.model.norm.weight", "vision"), "model.norm.weight");
}

// Both layouts of the tiny model expose the same canonical tensors with the same shapes.
TEST(Checkpoint, BothLayoutsCanonicaliseToTheSameTensors) {
  auto orig = Checkpoint::Open(test::FixturePath("tiny/orig"), CheckpointLayout::kOriginal);
  auto native = Checkpoint::Open(test::FixturePath("tiny/native"), CheckpointLayout::kNative);
  ASSERT_TRUE(orig.ok()) << orig.status().ToString();
  ASSERT_TRUE(native.ok()) << native.status().ToString();
  EXPECT_EQ(orig->num_files(), 3u);
  std::set<std::string> only_orig, only_native;
  for (const auto& [name, t] : orig->tensors()) {
    const TensorView* n = native->Find(name);
    if (n == nullptr) {
      only_orig.insert(name);
      continue;
    }
    EXPECT_EQ(t.shape, n->shape) << name;
    EXPECT_EQ(t.dtype, n->dtype) << name;
  }
  for (const auto& [name, t] : native->tensors())
    if (orig->Find(name) == nullptr) only_native.insert(name);
  EXPECT_TRUE(only_orig.empty()) << "only in orig, e.g. " << *only_orig.begin();
  EXPECT_TRUE(only_native.empty()) << "only in native, e.g. " << *only_native.begin();
  EXPECT_NE(orig->Find("model.layers.0.self_attn.qkv_proj.weight"), nullptr);
  EXPECT_NE(native->Find("model.layers.0.self_attn.qkv_proj.lora_A.vision.weight"), nullptr);
  EXPECT_EQ(orig->SourceName("model.layers.0.self_attn.qkv_proj.weight"),
            "model.layers.0.self_attn.qkv_proj.base_layer.weight");
}

TEST(Checkpoint, GetNamesTensorAndBothShapes) {
  auto ck = Checkpoint::Open(test::FixturePath("tiny/orig"), CheckpointLayout::kOriginal);
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  auto good = ck->Get("model.norm.weight", {48});
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  ExpectError(ck->Get("model.norm.weight", {64}).status(), StatusCode::kInvalidArgument,
              {"model.norm.weight", kShard1, "[48]", "[64]"});
  // The message uses the name as stored in the original file.
  ExpectError(ck->Get("model.layers.0.self_attn.o_proj.weight", {48, 49}).status(), StatusCode::kInvalidArgument,
              {"model.layers.0.self_attn.o_proj.base_layer.weight", "[48, 48]", "[48, 49]"});
  ExpectError(ck->Get("model.layers.9.mlp.down_proj.weight", {48, 64}).status(), StatusCode::kNotFound,
              {"model.layers.9.mlp.down_proj.weight"});
}

TEST(Checkpoint, ShardNameMustBePlain) {
  const std::string dir = CopyFixture("orig", "ck_shardname");
  EditJson(dir + "/model.safetensors.index.json",
           [](json& j) { j["weight_map"]["model.norm.weight"] = "../elsewhere.safetensors"; });
  ExpectError(Checkpoint::Open(dir, CheckpointLayout::kOriginal).status(), StatusCode::kInvalidArgument,
              {"../elsewhere.safetensors", "plain file name"});
}

TEST(Checkpoint, IndexWithoutWeightMap) {
  const std::string dir = CopyFixture("orig", "ck_noweightmap");
  test::WriteFile(dir + "/model.safetensors.index.json", R"({"metadata": {}})");
  ExpectError(Checkpoint::Open(dir, CheckpointLayout::kOriginal).status(), StatusCode::kInvalidArgument,
              {"model.safetensors.index.json", "weight_map"});
}

TEST(Checkpoint, DuplicateTensorAcrossShards) {
  const std::string dir = CopyFixture("orig", "ck_dup");
  // Shard 2 gets an extra copy of model.norm.weight, which shard 1 already holds.
  std::vector<RawTensor> ts = ReadTensors(dir + "/" + kShard2);
  ts.push_back({"model.norm.weight", "BF16", {48}, std::string(96, '\0')});
  test::WriteFile(dir + "/" + kShard2, BuildSafetensors(ts));
  ExpectError(Checkpoint::Open(dir, CheckpointLayout::kOriginal).status(), StatusCode::kDataLoss,
              {"model.norm.weight", kShard1, kShard2, "duplicate"});
}

// ---------------------------------------------------------------------------------------------
// Config: config.json parsing and validation (the values both fixture layouts give are checked in
// model_config_test.cc).

std::string TinyConfigText(const std::string& layout) {
  return test::ReadFile(test::FixturePath("tiny/" + layout + "/config.json"));
}

// tie_word_embeddings absent from config.json means false, as transformers reads it: a checkpoint
// that stores lm_head.weight decodes with it (here twice the embedding, so every logit doubles,
// exactly), and one that does not is an error naming the key, not a silent fallback to the
// embedding.
TEST(Config, AbsentTieWordEmbeddingsMeansTheStoredLmHead) {
  const std::string dir = CopyFixture("orig", "untied");
  EditJson(dir + "/config.json", [](json& j) { j.erase("tie_word_embeddings"); });
  auto missing = Model::Load(dir);
  ASSERT_FALSE(missing.ok());
  ExpectError(missing.status(), StatusCode::kNotFound, {"lm_head.weight", "tie_word_embeddings", "absent"});

  const std::string shard = dir + "/model-00001-of-00003.safetensors";
  std::vector<RawTensor> tensors = ReadTensors(shard);
  const RawTensor* embed = nullptr;
  for (const RawTensor& t : tensors)
    if (t.name == "model.embed_tokens.weight") embed = &t;
  ASSERT_NE(embed, nullptr);
  ASSERT_EQ(embed->dtype, "BF16");
  RawTensor head = *embed;
  head.name = "lm_head.weight";
  for (size_t i = 0; i + 1 < head.bytes.size(); i += 2) {  // bf16 x 2: the exponent's low bit up
    uint16_t v;
    std::memcpy(&v, head.bytes.data() + i, 2);
    if ((v & 0x7f80) != 0 && (v & 0x7f80) != 0x7f80) v = static_cast<uint16_t>(v + 0x80);
    std::memcpy(head.bytes.data() + i, &v, 2);
  }
  tensors.push_back(head);
  test::WriteFile(shard, BuildSafetensors(tensors));
  EditJson(dir + "/model.safetensors.index.json",
           [](json& j) { j["weight_map"]["lm_head.weight"] = "model-00001-of-00003.safetensors"; });
  auto untied = Model::Load(dir);
  ASSERT_TRUE(untied.ok()) << untied.status().ToString();
  auto tied = Model::Load(test::FixturePath("tiny/orig"));
  ASSERT_TRUE(tied.ok()) << tied.status().ToString();
  EXPECT_NE(&(*untied)->decoder().lm_head(), &(*untied)->embedding().matrix());
  const int64_t H = (*tied)->config().text.hidden_size, V = (*tied)->decoder().lm_head().rows();
  std::vector<float> hidden(static_cast<size_t>(H));
  for (int64_t i = 0; i < H; ++i) hidden[static_cast<size_t>(i)] = std::sin(0.7 * static_cast<double>(i));
  std::vector<float> a(static_cast<size_t>(V)), b(static_cast<size_t>(V));
  (*tied)->decoder().LogitsRows(hidden.data(), 1, a.data(), (*tied)->pool());
  (*untied)->decoder().LogitsRows(hidden.data(), 1, b.data(), (*untied)->pool());
  for (int64_t v = 0; v < V; v += 997) EXPECT_EQ(b[static_cast<size_t>(v)], 2 * a[static_cast<size_t>(v)]) << v;
}

TEST(Config, UnknownModelTypeIsUnsupported) {
  json j = json::parse(TinyConfigText("orig"));
  j["model_type"] = "llama";
  ExpectError(ModelConfig::ParseConfigJson(j.dump(), "'x/config.json'").status(), StatusCode::kUnsupported,
              {"x/config.json", "'llama'", "phi4mm", "phi4_multimodal"});
  j.erase("model_type");
  ExpectError(ModelConfig::ParseConfigJson(j.dump(), "'x/config.json'").status(), StatusCode::kInvalidArgument,
              {"x/config.json", "no 'model_type'"});
}

TEST(Config, MalformedJsonNamesTheFile) {
  ExpectError(ModelConfig::ParseConfigJson("{\"model_type\": \"phi4mm\",", "'y/config.json'").status(),
              StatusCode::kInvalidArgument, {"malformed JSON", "y/config.json"});
  ExpectError(ModelConfig::ParseConfigJson("[1]", "'y/config.json'").status(), StatusCode::kInvalidArgument,
              {"y/config.json", "not a JSON object"});
}

TEST(Config, WrongFieldTypesNameTheKey) {
  json j = json::parse(TinyConfigText("native"));
  j["hidden_size"] = "forty-eight";
  ExpectError(ModelConfig::ParseConfigJson(j.dump(), "cfg").status(), StatusCode::kInvalidArgument,
              {"'hidden_size'", "an integer", "forty-eight"});
  j = json::parse(TinyConfigText("native"));
  j["num_hidden_layers"] = 2.5;
  ExpectError(ModelConfig::ParseConfigJson(j.dump(), "cfg").status(), StatusCode::kInvalidArgument,
              {"'num_hidden_layers'", "2.5"});
  j = json::parse(TinyConfigText("native"));
  j["rope_scaling"]["short_factor"] = {1.0, "x", 2.0};
  ExpectError(ModelConfig::ParseConfigJson(j.dump(), "cfg").status(), StatusCode::kInvalidArgument,
              {"'short_factor'", "a list of numbers"});
  j = json::parse(TinyConfigText("native"));
  j["rope_scaling"]["type"] = "yarn";
  ExpectError(ModelConfig::ParseConfigJson(j.dump(), "cfg").status(), StatusCode::kUnsupported, {"'yarn'"});
  j = json::parse(TinyConfigText("native"));
  j["eos_token_id"] = "end";
  ExpectError(ModelConfig::ParseConfigJson(j.dump(), "cfg").status(), StatusCode::kInvalidArgument, {"'eos_token_id'"});
}

TEST(Config, HugeIntegersAreRejectedNotMisread) {
  for (const char* big : {"1e300", "-1e300", "9.3e18", "18446744073709551616"}) {
    json j = json::parse(TinyConfigText("native"));
    std::string text = j.dump();
    const std::string from = "\"hidden_size\":48";
    ASSERT_NE(text.find(from), std::string::npos);
    text.replace(text.find(from), from.size(), std::string("\"hidden_size\":") + big);
    auto c = ModelConfig::ParseConfigJson(text, "cfg");
    if (c.ok()) {
      ExpectError(c->Validate(), StatusCode::kInvalidArgument, {"hidden_size"});
    } else {
      ExpectError(c.status(), StatusCode::kInvalidArgument, {"'hidden_size'"});
    }
  }
  json j = json::parse(TinyConfigText("native"));
  j["head_dim"] = std::numeric_limits<int64_t>::max();
  j["partial_rotary_factor"] = 1.0;
  auto c = ModelConfig::ParseConfigJson(j.dump(), "cfg");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ExpectError(c->Validate(), StatusCode::kInvalidArgument, {"head_dim"});
}

ModelConfig ValidTiny() {
  auto c = ModelConfig::LoadFromDir(test::FixturePath("tiny/native"));
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? *c : ModelConfig{};
}

TEST(Config, ValidateInconsistentValues) {
  ModelConfig c = ValidTiny();
  ASSERT_TRUE(c.Validate().ok()) << c.Validate().ToString();

  c = ValidTiny();
  c.text.num_key_value_heads = 4;
  ExpectError(c.Validate(), StatusCode::kInvalidArgument, {"num_attention_heads (6)", "num_key_value_heads (4)"});

  c = ValidTiny();
  c.text.partial_rotary_factor = 0.625;  // 8 * 0.625 = 5, odd
  ExpectError(c.Validate(), StatusCode::kInvalidArgument, {"= 5", "even"});

  c = ValidTiny();
  c.text.partial_rotary_factor = 1.5;
  ExpectError(c.Validate(), StatusCode::kInvalidArgument, {"partial_rotary_factor", "(0, 1]"});

  c = ValidTiny();
  c.text.rope_long_factor = {1.0, 2.0};
  ExpectError(c.Validate(), StatusCode::kInvalidArgument, {"short_factor/long_factor", "= 3 entries", "3 and 2"});

  c = ValidTiny();
  c.text.original_max_position_embeddings = 0;
  ExpectError(c.Validate(), StatusCode::kInvalidArgument, {"original_max_position_embeddings"});

  for (auto field : {&TextConfig::vocab_size, &TextConfig::hidden_size, &TextConfig::num_hidden_layers,
                     &TextConfig::num_attention_heads, &TextConfig::num_key_value_heads, &TextConfig::head_dim,
                     &TextConfig::max_position_embeddings, &TextConfig::intermediate_size}) {
    c = ValidTiny();
    c.text.*field = -3;
    ExpectError(c.Validate(), StatusCode::kInvalidArgument, {"must be positive, got -3"});
  }
}

}  // namespace
}  // namespace phi4mm
