// The ONNX writer and `phi4mm export` on the tiny fixture: written models pass onnx::checker and
// strict shape inference (and a broken one does not), external data is aligned, the package has
// the official input/output names, both checkpoint layouts export the same weights, and the JSON
// files say what ORT GenAI needs (type phi4mm, no adapter files, no 30 s audio cut).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

#include <nlohmann/json.hpp>
#include <onnx/onnx_pb.h>

#include "phi4mm/export/package.h"
#include "phi4mm/onnx/onnx_writer.h"
#include "test_util.h"

namespace phi4mm {
namespace {

using onnx_writer::Attr;
using onnx_writer::Dim;
using onnx_writer::ElemType;

onnx::ModelProto ReadModel(const std::string& path) {
  onnx::ModelProto m;
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in && m.ParseFromIstream(&in)) << path;
  return m;
}

std::vector<std::string> Names(const google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>& v) {
  std::vector<std::string> out;
  for (const auto& x : v) out.push_back(x.name());
  return out;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(OnnxWriterTest, WritesACheckedModelWithAlignedExternalData) {
  const std::string dir = test::TempDir("onnx_writer");
  auto w = onnx_writer::ModelWriter::Create(dir, "m.onnx", "m");
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  onnx_writer::Graph& g = (*w)->graph();
  g.Input("x", ElemType::kFloat, {Dim("n"), int64_t{300}});
  g.Output("y", ElemType::kFloat, {Dim("n"), int64_t{300}});
  std::vector<float> small(4, 1.0f), big(300, 2.0f), big2(300, 3.0f);
  ASSERT_TRUE((*w)->AddFloat("small", small.data(), {4}).ok());
  ASSERT_TRUE((*w)->AddFloat("big", big.data(), {300}).ok());
  ASSERT_TRUE((*w)->AddFloat("big2", big2.data(), {300}).ok());
  auto branch = [&](const char* init) {
    auto [proto, sub] = (*w)->Subgraph("branch");
    sub.Output(sub.Op("Identity", {init}), ElemType::kFloat, {int64_t{300}});
    return proto;
  };
  const std::string cond = g.Op("Greater", {g.ConstInts({1}, true), g.ConstInts({0}, true)});
  const std::string pick =
      g.Op("If", {cond}, {Attr::Graph("then_branch", branch("big")), Attr::Graph("else_branch", branch("big2"))});
  g.Node("Add", {"x", pick}, 1, {}, "", {"y"});
  ASSERT_TRUE((*w)->Save().ok());
  EXPECT_TRUE(onnx_writer::CheckModelFile(dir + "/m.onnx").ok()) << onnx_writer::CheckModelFile(dir + "/m.onnx").ToString();
  // big at offset 0, big2 at the next 4 KiB boundary; the 16-byte tensor stays inline.
  EXPECT_EQ(std::filesystem::file_size(dir + "/m.onnx.data"), 4096u + 1200u);
  const onnx::ModelProto m = ReadModel(dir + "/m.onnx");
  ASSERT_EQ(m.graph().initializer_size(), 3);
  EXPECT_FALSE(m.graph().initializer(0).has_data_location() &&
               m.graph().initializer(0).data_location() == onnx::TensorProto::EXTERNAL);
  EXPECT_EQ(m.graph().initializer(2).external_data(1).value(), "4096");
}

TEST(OnnxWriterTest, CheckerRejectsABrokenModel) {
  const std::string dir = test::TempDir("onnx_writer_bad");
  auto w = onnx_writer::ModelWriter::Create(dir, "bad.onnx", "bad");
  ASSERT_TRUE(w.ok());
  onnx_writer::Graph& g = (*w)->graph();
  g.Input("x", ElemType::kFloat, {int64_t{2}, int64_t{3}});
  g.Output("y", ElemType::kFloat, {int64_t{2}, int64_t{3}});
  // ORT's SimplifiedLayerNormalization in the default domain is what the checker refuses.
  g.Node("SimplifiedLayerNormalization", {"x", "x"}, 1, {}, "", {"y"});
  ASSERT_TRUE((*w)->Save().ok());
  const Status st = onnx_writer::CheckModelFile(dir + "/bad.onnx");
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.ToString().find("SimplifiedLayerNormalization"), std::string::npos) << st.ToString();
}

class ExportPackageTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    for (const char* layout : {"orig", "native"}) {
      const std::string out = test::TempDir(std::string("export_") + layout);
      exporter::ExportOptions o;
      o.require_runnable = false;  // head_dim 8: the writer is tested here, ORT runs the trained fixture
      auto s = exporter::ExportPackage(test::FixturePath(std::string("tiny/") + layout), out, o);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      dirs_[layout] = out;
      kv_layers_ = s->kv_layers;
    }
  }
  static std::map<std::string, std::string> dirs_;
  static int64_t kv_layers_;
};
std::map<std::string, std::string> ExportPackageTest::dirs_;
int64_t ExportPackageTest::kv_layers_ = 0;

TEST_F(ExportPackageTest, ModelsPassTheCheckerAndShapeInference) {
  for (const auto& [layout, dir] : dirs_)
    for (const char* f : {exporter::kTextFile, exporter::kEmbeddingFile, exporter::kVisionFile, exporter::kSpeechFile}) {
      const Status st = onnx_writer::CheckModelFile(dir + "/" + f);
      EXPECT_TRUE(st.ok()) << layout << ": " << st.ToString();
    }
}

TEST_F(ExportPackageTest, DecoderHasTheOfficialNamesPlusInputIdsAndTheRegister) {
  auto cfg = ModelConfig::LoadFromDir(test::FixturePath("tiny/orig"));
  ASSERT_TRUE(cfg.ok());
  const int64_t L = cfg->text.num_hidden_layers;
  EXPECT_EQ(kv_layers_, L + 1);
  const onnx::ModelProto m = ReadModel(dirs_["orig"] + "/" + exporter::kTextFile);
  std::vector<std::string> want_in = {"inputs_embeds", "attention_mask", "input_ids"}, want_out = {"logits"};
  for (int64_t l = 0; l <= L; ++l) {
    want_in.push_back("past_key_values." + std::to_string(l) + ".key");
    want_in.push_back("past_key_values." + std::to_string(l) + ".value");
    want_out.push_back("present." + std::to_string(l) + ".key");
    want_out.push_back("present." + std::to_string(l) + ".value");
  }
  EXPECT_EQ(Names(m.graph().input()), want_in);
  EXPECT_EQ(Names(m.graph().output()), want_out);
  // logits [batch_size, 1, vocab]: last position only (ORT GenAI's "pruned" logits).
  const auto& dims = m.graph().output(0).type().tensor_type().shape().dim();
  ASSERT_EQ(dims.size(), 3);
  EXPECT_EQ(dims[0].dim_param(), "batch_size");
  EXPECT_EQ(dims[1].dim_value(), 1);
  EXPECT_EQ(dims[2].dim_value(), cfg->text.vocab_size);
  std::map<std::string, int> ops;
  for (const auto& n : m.graph().node()) ops[n.domain() + ":" + n.op_type()]++;
  EXPECT_EQ(ops["com.microsoft:GroupQueryAttention"], L + 1);
  EXPECT_EQ(ops["com.microsoft:SkipSimplifiedLayerNormalization"], 2 * L);
  EXPECT_EQ(ops[":If"], 1 + 2 * 4 * L);  // the LongRoPE switch + the default --lora if's branches
  for (const auto& n : m.graph().node())
    if (n.op_type() == "GroupQueryAttention" && n.output(1) != "present." + std::to_string(L) + ".key") {
      std::map<std::string, int64_t> a;
      for (const auto& at : n.attribute()) a[at.name()] = at.i();
      EXPECT_EQ(a["do_rotary"], 1);
      EXPECT_EQ(a["rotary_interleaved"], 0);
      EXPECT_EQ(a["num_heads"], cfg->text.num_attention_heads);
      EXPECT_EQ(a["kv_num_heads"], cfg->text.num_key_value_heads);
    }
}

TEST_F(ExportPackageTest, EmbeddingHasTheOfficialNames) {
  const onnx::ModelProto m = ReadModel(dirs_["native"] + "/" + exporter::kEmbeddingFile);
  EXPECT_EQ(Names(m.graph().input()), (std::vector<std::string>{"input_ids", "image_features", "audio_features"}));
  EXPECT_EQ(Names(m.graph().output()), (std::vector<std::string>{"inputs_embeds"}));
}

TEST_F(ExportPackageTest, VisionAndSpeechHaveTheOfficialNames) {
  const onnx::ModelProto v = ReadModel(dirs_["orig"] + "/" + exporter::kVisionFile);
  EXPECT_EQ(Names(v.graph().input()),
            (std::vector<std::string>{"pixel_values", "image_attention_mask", "image_sizes"}));
  EXPECT_EQ(Names(v.graph().output()), (std::vector<std::string>{"image_features"}));
  const onnx::ModelProto s = ReadModel(dirs_["orig"] + "/" + exporter::kSpeechFile);
  EXPECT_EQ(Names(s.graph().input()), (std::vector<std::string>{"audio_embeds", "audio_attention_mask", "audio_sizes",
                                                                 "audio_projection_mode"}));
  EXPECT_EQ(Names(s.graph().output()), (std::vector<std::string>{"audio_features"}));
  // ORT GenAI requires int64 audio_sizes and a bool mask.
  EXPECT_EQ(s.graph().input(1).type().tensor_type().elem_type(), onnx::TensorProto::BOOL);
  EXPECT_EQ(s.graph().input(2).type().tensor_type().elem_type(), onnx::TensorProto::INT64);
  // Both outputs are 2-D [tokens, text hidden].
  auto cfg = ModelConfig::LoadFromDir(test::FixturePath("tiny/orig"));
  ASSERT_TRUE(cfg.ok());
  for (const onnx::ModelProto* m : {&v, &s}) {
    const auto& dims = m->graph().output(0).type().tensor_type().shape().dim();
    ASSERT_EQ(dims.size(), 2);
    EXPECT_EQ(dims[1].dim_value(), cfg->text.hidden_size);
  }
}

TEST_F(ExportPackageTest, BothLayoutsExportTheSameWeights) {
  for (const char* f : {"phi-4-mm-text.onnx.data", "phi-4-mm-embedding.onnx.data", "phi-4-mm-vision.onnx.data",
                        "phi-4-mm-speech.onnx.data"}) {
    const std::string a = ReadAll(dirs_["orig"] + "/" + f), b = ReadAll(dirs_["native"] + "/" + f);
    EXPECT_GT(a.size(), 10000u) << f;
    EXPECT_TRUE(a == b) << f << " differs between the layouts";
  }
}

TEST_F(ExportPackageTest, JsonFiles) {
  const std::string dir = dirs_["orig"];
  const nlohmann::json g = nlohmann::json::parse(ReadAll(dir + "/genai_config.json"));
  EXPECT_EQ(g["model"]["type"], "phi4mm");
  EXPECT_EQ(g["model"]["decoder"]["num_hidden_layers"], kv_layers_);
  EXPECT_EQ(g["model"]["decoder"]["inputs"]["input_ids"], "input_ids");
  EXPECT_EQ(g["model"]["vocab_size"], 200064);
  EXPECT_FALSE(g["model"]["vision"].contains("adapter_filename"));
  EXPECT_FALSE(g["model"]["speech"].contains("adapter_filename"));
  EXPECT_FALSE(g["search"].contains("chunk_size"));
  const nlohmann::json s = nlohmann::json::parse(ReadAll(dir + "/speech_processor.json"));
  const auto& dec = s["feature_extraction"]["sequence"][0]["operation"];
  EXPECT_EQ(dec["type"], "AudioDecoderEx");
  EXPECT_EQ(dec["attrs"]["max_samples"], 0);
  const nlohmann::json v = nlohmann::json::parse(ReadAll(dir + "/vision_processor.json"));
  EXPECT_EQ(v["processor"]["transforms"][1]["operation"]["attrs"]["dynamic_hd"], 36);
  EXPECT_TRUE(std::filesystem::exists(dir + "/tokenizer.json"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/tokenizer_config.json"));
}

TEST(ExportOptionsTest, ValidatesAndMapsPrecisions) {
  exporter::ExportOptions o;
  EXPECT_TRUE(o.Validate().ok());
  EXPECT_EQ(o.RealType(), ElemType::kFloat);
  o.precision = "fp16";
  EXPECT_EQ(o.RealType(), ElemType::kFloat16);
  o.precision = "int4";
  EXPECT_TRUE(o.Validate().ok());
  EXPECT_EQ(o.RealType(), ElemType::kFloat);  // cpu int4: float32 I/O, int8 activations in MatMulNBits
  EXPECT_EQ(o.AccuracyLevel(), 4);
  o.target = "cuda";
  EXPECT_EQ(o.RealType(), ElemType::kFloat16);
  EXPECT_EQ(o.AccuracyLevel(), 0);
  o.precision = "fp8";
  EXPECT_EQ(o.Validate().code(), StatusCode::kInvalidArgument);
  o.precision = "fp32";
  o.target = "tpu";
  EXPECT_EQ(o.Validate().code(), StatusCode::kInvalidArgument);
  o.target = "cpu";
  o.lora = "merged";
  EXPECT_EQ(o.Validate().code(), StatusCode::kInvalidArgument);
}

// Ops of a graph and of its If branches, by "domain:op".
void CountOps(const onnx::GraphProto& g, std::map<std::string, int>* ops) {
  for (const auto& n : g.node()) {
    (*ops)[n.domain() + ":" + n.op_type()]++;
    for (const auto& a : n.attribute())
      if (a.has_g()) CountOps(a.g(), ops);
  }
}

// Exports the tiny fixture with `precision` / `target` / `lora`; returns the folder.
std::string ExportVariant(const std::string& precision, const std::string& target, const std::string& lora) {
  exporter::ExportOptions o;
  o.precision = precision;
  o.target = target;
  o.lora = lora;
  o.require_runnable = false;
  const std::string out = test::TempDir("export_" + precision + "_" + target + "_" + lora);
  auto s = exporter::ExportPackage(test::FixturePath("tiny/orig"), out, o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  for (const char* f : {exporter::kTextFile, exporter::kEmbeddingFile, exporter::kVisionFile, exporter::kSpeechFile}) {
    const Status st = onnx_writer::CheckModelFile(out + "/" + f);
    EXPECT_TRUE(st.ok()) << precision << "/" << target << "/" << lora << ": " << st.ToString();
  }
  return out;
}

TEST(ExportVariantsTest, Int4DecoderIsMatMulNBitsWithEightBitHeadAndAdapters) {
  auto cfg = ModelConfig::LoadFromDir(test::FixturePath("tiny/orig"));
  ASSERT_TRUE(cfg.ok());
  const int64_t L = cfg->text.num_hidden_layers;
  for (const char* target : {"cpu", "cuda"}) {
    const std::string dir = ExportVariant("int4", target, "sum");
    const onnx::ModelProto m = ReadModel(dir + "/" + exporter::kTextFile);
    std::map<std::string, int> ops;
    CountOps(m.graph(), &ops);
    EXPECT_EQ(ops[":MatMul"], 0) << target;
    // Per layer 4 linears + A and B of 2 adapters on each; plus the lm_head.
    EXPECT_EQ(ops["com.microsoft:MatMulNBits"], L * (4 + 2 * 2 * 4) + 1) << target;
    std::map<int64_t, int> by_bits;
    for (const auto& n : m.graph().node()) {
      if (n.op_type() != "MatMulNBits") continue;
      std::map<std::string, int64_t> a;
      for (const auto& at : n.attribute()) a[at.name()] = at.i();
      by_bits[a["bits"]]++;
      EXPECT_EQ(a["block_size"], 32);
      EXPECT_EQ(a["accuracy_level"], std::string(target) == "cpu" ? 4 : 0);
    }
    EXPECT_EQ(by_bits[4], 4 * L);
    EXPECT_EQ(by_bits[8], 16 * L + 1);
    const int32_t io = m.graph().input(0).type().tensor_type().elem_type();
    EXPECT_EQ(io, std::string(target) == "cpu" ? onnx::TensorProto::FLOAT : onnx::TensorProto::FLOAT16);
  }
}

TEST(ExportVariantsTest, Fp16PackageIsHalfThroughout) {
  const std::string dir = ExportVariant("fp16", "cuda", "sum");
  for (const char* f : {exporter::kTextFile, exporter::kEmbeddingFile, exporter::kVisionFile, exporter::kSpeechFile}) {
    const onnx::ModelProto m = ReadModel(dir + "/" + f);
    int half_io = 0;
    for (const auto* list : {&m.graph().input(), &m.graph().output()})
      for (const auto& v : *list) {
        const int32_t t = v.type().tensor_type().elem_type();
        EXPECT_NE(t, onnx::TensorProto::FLOAT) << f << ": " << v.name();
        half_io += t == onnx::TensorProto::FLOAT16;
      }
    EXPECT_GT(half_io, 0) << f;
    for (const auto& init : m.graph().initializer())
      EXPECT_NE(init.data_type(), onnx::TensorProto::FLOAT) << f << ": " << init.name();
  }
  const nlohmann::json g = nlohmann::json::parse(ReadAll(dir + "/genai_config.json"));
  EXPECT_TRUE(g["model"]["decoder"]["session_options"]["provider_options"][0].contains("cuda"));
}

TEST(ExportVariantsTest, LoraIfRunsEachAdapterInItsOwnBranchAndNoneDropsThem) {
  auto cfg = ModelConfig::LoadFromDir(test::FixturePath("tiny/orig"));
  ASSERT_TRUE(cfg.ok());
  const int64_t L = cfg->text.num_hidden_layers;
  {
    const onnx::ModelProto m = ReadModel(ExportVariant("fp32", "cpu", "if") + "/" + exporter::kTextFile);
    std::map<std::string, int> top, all;
    for (const auto& n : m.graph().node()) top[n.domain() + ":" + n.op_type()]++;
    CountOps(m.graph(), &all);
    EXPECT_EQ(top[":If"], 1 + 2 * 4 * L);       // the LongRoPE switch + one per adapter and projection
    EXPECT_EQ(top[":MatMul"], 4 * L + 1);        // the base linears and the lm_head
    EXPECT_EQ(all[":MatMul"], 4 * L + 1 + 2 * 2 * 4 * L);  // the adapters' A and B inside the branches
    EXPECT_EQ(Names(m.graph().input())[2], "input_ids");
  }
  {
    const std::string dir = ExportVariant("fp32", "cpu", "none");
    const onnx::ModelProto m = ReadModel(dir + "/" + exporter::kTextFile);
    std::map<std::string, int> ops;
    CountOps(m.graph(), &ops);
    EXPECT_EQ(ops[":MatMul"], 4 * L + 1);
    EXPECT_EQ(ops["com.microsoft:GroupQueryAttention"], L);  // no mode register
    const std::vector<std::string> in = Names(m.graph().input());
    EXPECT_EQ(std::count(in.begin(), in.end(), "input_ids"), 0);
    const nlohmann::json g = nlohmann::json::parse(ReadAll(dir + "/genai_config.json"));
    EXPECT_EQ(g["model"]["decoder"]["num_hidden_layers"], L);
    EXPECT_FALSE(g["model"]["decoder"]["inputs"].contains("input_ids"));
  }
}

TEST(ExportRunnable, AHeadSizeOrtCannotRunIsRefusedBeforeAnythingIsWritten) {
  const std::string out = test::TempDir("export_unrunnable") + "/package";
  auto s = exporter::ExportPackage(test::FixturePath("tiny/orig"), out, {});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kUnsupported);
  for (const char* part : {"head size is 8", "multiple of 16", "GroupQueryAttention"})
    EXPECT_NE(s.status().ToString().find(part), std::string::npos) << s.status().ToString();
  EXPECT_FALSE(std::filesystem::exists(out));
  // The trained fixture (head_dim 64, the one ORT runs in scripts/onnx_checks.sh) and Phi-4's 128 pass.
  auto trained = ModelConfig::LoadFromDir(test::FixturePath("trained/orig"));
  ASSERT_TRUE(trained.ok());
  EXPECT_TRUE(exporter::RunnableByOrt(*trained).ok());
  trained->text.head_dim = 128;
  EXPECT_TRUE(exporter::RunnableByOrt(*trained).ok());
  trained->text.head_dim = 72;
  EXPECT_FALSE(exporter::RunnableByOrt(*trained).ok());
}

}  // namespace
}  // namespace phi4mm
