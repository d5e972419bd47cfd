// Decoder parity with transformers on the tiny fixtures, in both checkpoint layouts: input
// embeddings, every layer's output, the final norm, the logits of the prefill and of every greedy
// decode step, and the greedy tokens, for each LoRA mode and for prompts on both sides of the
// LongRoPE switch. Tolerance: max abs error <= 1e-4 x the reference tensor's max abs value (fp32).
//
// The `cross_*` cases start below original_max_position_embeddings and pass it while decoding.
// transformers' generate() recomputes the dropped cache at that step with a mask built for one
// query row, i.e. NON-causally (see docs/fixtures.md). phi4mm recomputes causally, so those cases
// are checked against the fixture's `ideal.*` tensors (a causal no-cache forward at every step), and
// against generate()'s own `step.*` logits for every step before the switch.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "phi4mm/runtime/session.h"
#include "test_util.h"

namespace phi4mm {
namespace {

using test::FixturePath;

constexpr double kRelTol = 1e-4;

struct Case {
  std::string name, lora, file;
  std::vector<int32_t> input_ids;
  int64_t steps = 0;
  bool crosses_switch = false;
};

std::vector<Case> LoadCases() {
  std::ifstream in(FixturePath("tiny/reference/cases.json"));
  nlohmann::json j = nlohmann::json::parse(in);
  std::vector<Case> cases;
  for (const auto& c : j["cases"]) {
    Case k;
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

LoraMode ModeOf(const std::string& s) {
  if (s == "vision") return LoraMode::kVision;
  if (s == "speech") return LoraMode::kSpeech;
  return LoraMode::kNone;
}

std::shared_ptr<const Model> LoadLayout(const std::string& layout) {
  static std::map<std::string, std::shared_ptr<const Model>> cache;
  auto& m = cache[layout];
  if (!m) {
    auto r = Model::Load(FixturePath("tiny/" + layout));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (r.ok()) m = *r;
  }
  return m;
}

// Largest error/scale seen in the running test, printed at its end for the record.
double g_worst_rel = 0;

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const double scale = std::max(1e-6, test::MaxAbs(want));
  const double err = test::MaxAbsDiff(got, want);
  g_worst_rel = std::max(g_worst_rel, err / scale);
  EXPECT_LE(err, kRelTol * scale) << what << ": max abs error " << err << " vs scale " << scale;
}

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class DecoderParity : public ::testing::TestWithParam<std::tuple<std::string, Case>> {};

TEST_P(DecoderParity, MatchesTransformers) {
  const auto& [layout, c] = GetParam();
  auto model = LoadLayout(layout);
  ASSERT_NE(model, nullptr);
  auto ref_file = SafetensorsFile::Open(FixturePath("tiny/reference/" + c.file));
  ASSERT_TRUE(ref_file.ok()) << ref_file.status().ToString();
  const auto& ref = ref_file->tensors();
  auto live_file = SafetensorsFile::Open(FixturePath("tiny/reference/live_ids.safetensors"));
  ASSERT_TRUE(live_file.ok());
  const std::vector<int64_t> live = test::ToInts(live_file->tensors().begin()->second);
  ASSERT_GT(live.size(), 4000u);

  g_worst_rel = 0;
  Session session(model);
  test::MemoryTap tap;
  session.SetTap(&tap);
  GenerateOptions opts;
  opts.max_new_tokens = c.steps;
  opts.stop_ids = {-1};  // record every step, as the reference did
  auto res = session.Generate(c.input_ids, ModeOf(c.lora), opts);
  ASSERT_TRUE(res.ok()) << res.status().ToString();

  for (const std::string& name : {std::string("prefill.embeds"), std::string("prefill.layer.0"),
                                  std::string("prefill.layer.1"), std::string("prefill.layer.2"),
                                  std::string("prefill.norm")}) {
    ASSERT_TRUE(tap.tensors.count(name)) << name;
    ExpectClose(tap.tensors[name].data, test::ToFloats(ref.at(name)), c.name + " " + name);
  }

  const std::string prefix = c.crosses_switch ? "ideal." : "";
  const std::vector<int64_t> want_tokens = test::ToInts(ref.at(prefix + "greedy"));
  std::vector<int64_t> got_tokens(res->tokens.begin(), res->tokens.end());
  EXPECT_EQ(got_tokens, want_tokens) << c.name;

  const int64_t switch_step = 32 - static_cast<int64_t>(c.input_ids.size()) + 1;  // first step with 33 positions
  for (int64_t k = 0; k < c.steps; ++k) {
    const std::string mine = k == 0 ? "prefill.logits" : "step." + std::to_string(k) + ".logits";
    ASSERT_TRUE(tap.tensors.count(mine)) << mine;
    const std::vector<float>& logits = tap.tensors[mine].data;
    std::vector<float> at_live;
    std::vector<bool> is_live(logits.size(), false);
    for (int64_t id : live) {
      at_live.push_back(logits[id]);
      is_live[id] = true;
    }
    ExpectClose(at_live, test::ToFloats(ref.at(prefix + "step." + std::to_string(k) + ".logits")),
                c.name + " step " + std::to_string(k) + " logits");
    if (c.crosses_switch && k < switch_step)
      ExpectClose(at_live, test::ToFloats(ref.at("step." + std::to_string(k) + ".logits")),
                  c.name + " step " + std::to_string(k) + " logits (generate, before the switch)");
    size_t nonzero_dead = 0;
    for (size_t i = 0; i < logits.size(); ++i)
      if (!is_live[i] && logits[i] != 0.0f) ++nonzero_dead;
    EXPECT_EQ(nonzero_dead, 0u) << "logits of zero embedding rows must be exactly 0";
  }
  std::printf("[parity] %s/%s: worst max-abs-error / scale = %.3g over embeds, layers, norm and %lld steps of logits\n",
              layout.c_str(), c.name.c_str(), g_worst_rel, static_cast<long long>(c.steps));
}

std::vector<std::tuple<std::string, Case>> AllCases() {
  std::vector<std::tuple<std::string, Case>> v;
  for (const char* layout : {"orig", "native"})
    for (const Case& c : LoadCases()) v.emplace_back(layout, c);
  return v;
}

INSTANTIATE_TEST_SUITE_P(Tiny, DecoderParity, ::testing::ValuesIn(AllCases()),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param).name;
                         });

}  // namespace
}  // namespace phi4mm
