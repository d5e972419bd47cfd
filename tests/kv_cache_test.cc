// KV cache element types and the attention over them: IEEE-half caches give the float32 result on
// the half-rounded keys/values; the grouped AVX2 row kernels (float, half and 8-bit rows) match the
// scalar ones; splitting the cached length over threads matches the unsplit result; a half cache is
// half the size and an 8-bit one (hd + 4) / (4 hd) of it, each is what Model::Info reports, and
// each keeps the tiny model's logits close; `phi4mm bench` runs on the tiny fixture and prints its
// JSON keys, and `bench --concurrency --step-profile` its step parts (no timing is checked).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "phi4mm/base/half.h"
#include "phi4mm/kernels/attention.h"
#include "phi4mm/kernels/isa.h"
#include "phi4mm/runtime/session.h"
#include "test_util.h"

namespace phi4mm {
namespace {

std::vector<float> Rand(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::vector<uint16_t> ToHalf(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = F32ToF16(v[i]);
  return h;
}

std::vector<float> FromHalf(const std::vector<uint16_t>& h) {
  std::vector<float> v(h.size());
  for (size_t i = 0; i < h.size(); ++i) v[i] = F16ToF32(h[i]);
  return v;
}

struct Case {
  int64_t past, S, heads, kv_heads, hd;
};

TEST(KvCacheAttention, HalfCacheMatchesFloatOnRoundedValues) {
  for (int threads : {1, 2, 8}) {
    ThreadPool pool(threads);
    for (const Case c : {Case{0, 5, 6, 2, 20}, Case{7, 1, 6, 2, 128}, Case{300, 1, 24, 8, 128},
                         Case{600, 2, 6, 1, 64}, Case{3, 4, 8, 8, 16}}) {
      const AttentionShape sh{c.heads, c.kv_heads, c.hd, 0.125f};
      const int64_t T = c.past + c.S;
      const auto q = Rand(c.S * c.heads * c.hd, 1);
      const auto k16 = ToHalf(Rand(T * c.kv_heads * c.hd, 2)), v16 = ToHalf(Rand(T * c.kv_heads * c.hd, 3));
      const auto k = FromHalf(k16), v = FromHalf(v16);
      std::vector<float> want(q.size()), got(q.size());
      CausalAttention(q.data(), k.data(), v.data(), c.past, c.S, sh, want.data(), nullptr);
      CausalAttention(q.data(), KvView{k16.data(), v16.data(), KvDType::kF16}, c.past, c.S, sh, got.data(), &pool);
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 2e-5) << "threads " << threads << " past " << c.past << " i " << i;
      // The float cache split over threads agrees with the single-threaded one too.
      CausalAttention(q.data(), k.data(), v.data(), c.past, c.S, sh, got.data(), &pool);
      for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 2e-5);
    }
  }
}

// Every row table this CPU offers (the dispatch point's list) against the scalar one.
TEST(KvCacheAttention, EveryRowTableMatchesScalar) {
  namespace ai = attention_internal;
  const ai::RowKernels& s = ai::ScalarRowKernels();
  int checked = 0;
  for (Isa isa : AvailableIsas()) {
  const ai::RowKernels& a = ai::RowKernelsFor(isa);
  if (&a == &s) continue;
  ++checked;
  SCOPED_TRACE(IsaName(isa));
  for (int G : {1, 3, 4, 5})
    for (int64_t hd : {5, 16, 72, 128}) {
      const int64_t len = 131, stride = 2 * hd;
      const auto q = Rand(G * hd, 4), kf = Rand(len * stride, 5), p = Rand(G * len, 6);
      const auto kh = ToHalf(kf);
      std::vector<float> s1(G * len), s2(G * len), o1(G * hd, 0.5f), o2(G * hd, 0.5f);
      s.scores_f16(q.data(), G, kh.data(), stride, len, hd, 0.3f, s1.data());
      a.scores_f16(q.data(), G, kh.data(), stride, len, hd, 0.3f, s2.data());
      for (size_t i = 0; i < s1.size(); ++i) ASSERT_NEAR(s1[i], s2[i], 1e-4);
      s.scores_f32(q.data(), G, kf.data(), stride, len, hd, 0.3f, s1.data());
      a.scores_f32(q.data(), G, kf.data(), stride, len, hd, 0.3f, s2.data());
      for (size_t i = 0; i < s1.size(); ++i) ASSERT_NEAR(s1[i], s2[i], 1e-4);
      s.accum_f32(p.data(), len, G, kf.data(), stride, len, hd, o1.data());
      a.accum_f32(p.data(), len, G, kf.data(), stride, len, hd, o2.data());
      for (size_t i = 0; i < o1.size(); ++i) ASSERT_NEAR(o1[i], o2[i], 1e-3);
      std::fill(o1.begin(), o1.end(), 0.5f);
      std::fill(o2.begin(), o2.end(), 0.5f);
      s.accum_f16(p.data(), len, G, kh.data(), stride, len, hd, o1.data());
      a.accum_f16(p.data(), len, G, kh.data(), stride, len, hd, o2.data());
      for (size_t i = 0; i < o1.size(); ++i) ASSERT_NEAR(o1[i], o2[i], 1e-3);
      // 8-bit rows: int8 values `stride` bytes apart, each row's float scale at sc + t * stride.
      std::vector<uint8_t> k8(len * stride + 4);
      for (int64_t t = 0; t < len; ++t) {
        for (int64_t d = 0; d < hd; ++d) k8[t * stride + d] = static_cast<uint8_t>(static_cast<int8_t>((t * 7 + d * 13) % 255 - 127));
        const float sc = 0.01f * static_cast<float>(t % 5 + 1);
        std::memcpy(k8.data() + t * stride + hd, &sc, 4);
      }
      const auto* k8v = reinterpret_cast<const int8_t*>(k8.data());
      s.scores_q8(q.data(), G, k8v, k8.data() + hd, stride, len, hd, 0.3f, s1.data());
      a.scores_q8(q.data(), G, k8v, k8.data() + hd, stride, len, hd, 0.3f, s2.data());
      for (size_t i = 0; i < s1.size(); ++i) ASSERT_NEAR(s1[i], s2[i], 1e-4 * std::max(1.0f, std::fabs(s1[i])));
      s.accum_q8(p.data(), len, G, k8v, k8.data() + hd, stride, len, hd, o1.data());
      a.accum_q8(p.data(), len, G, k8v, k8.data() + hd, stride, len, hd, o2.data());
      for (size_t i = 0; i < o1.size(); ++i) ASSERT_NEAR(o1[i], o2[i], 1e-3);
      std::vector<uint16_t> h1(kf.size()), h2(kf.size());
      s.to_f16(kf.data(), static_cast<int64_t>(kf.size()), h1.data());
      a.to_f16(kf.data(), static_cast<int64_t>(kf.size()), h2.data());
      ASSERT_EQ(h1, h2);
    }
  }
  if (checked == 0) GTEST_SKIP() << "this CPU offers only the scalar row table";
}

// Unset kv_dtype: float32 where the weights run as stored (the exact parity mode), f16 under the
// converting modes.
TEST(KvCacheModel, DefaultDtypeIsF32AsStoredAndF16WhenQuantized) {
  for (QuantMode q : {QuantMode::kNone, QuantMode::kBF16, QuantMode::kQ8, QuantMode::kQ4}) {
    LoadOptions o;
    o.quant = q;
    auto m = Model::Load(test::FixturePath("tiny/orig"), o);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_EQ((*m)->Info().kv_dtype, q == QuantMode::kNone ? "f32" : "f16") << QuantModeName(q);
  }
}

TEST(KvCacheModel, HalfAnd8BitCachesAreSmallerAndKeepLogitsClose) {
  std::vector<float> logits[3];
  size_t bytes[3] = {};
  int64_t hd = 0;
  for (KvDType dt : {KvDType::kF32, KvDType::kF16, KvDType::kQ8}) {
    LoadOptions o;
    o.kv_dtype = dt;
    auto m = Model::Load(test::FixturePath("tiny/orig"), o);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    const TextConfig& t = (*m)->config().text;
    EXPECT_EQ((*m)->Info().kv_dtype, KvDTypeName(dt));
    hd = t.head_dim;
    EXPECT_EQ((*m)->Info().kv_bytes_per_token,
              2 * t.num_hidden_layers * t.num_key_value_heads * (dt == KvDType::kF32   ? 4 * t.head_dim
                                                                  : dt == KvDType::kF16 ? 2 * t.head_dim
                                                                                        : t.head_dim + 4));
    Session s(*m);
    std::vector<int32_t> ids = {100, 2000, 300, 4000, 50, 600, 7000, 80};
    ASSERT_TRUE(s.Append(ids, LoraMode::kNone).ok());
    ASSERT_TRUE(s.Append(std::vector<int32_t>{9}, LoraMode::kNone).ok());
    logits[static_cast<int>(dt)] = s.logits();
    bytes[static_cast<int>(dt)] = s.kv_cache_bytes();
  }
  EXPECT_EQ(bytes[1] * 2, bytes[0]);
  EXPECT_EQ(bytes[2] * 4 * hd, bytes[0] * (hd + 4));
  EXPECT_LT(test::MaxAbsDiff(logits[0], logits[1]), 1e-2 * test::MaxAbs(logits[0]));
  std::printf("q8 KV cache: logits max-abs-error / scale %.3g (f16: %.3g)\n",
              test::MaxAbsDiff(logits[0], logits[2]) / test::MaxAbs(logits[0]),
              test::MaxAbsDiff(logits[0], logits[1]) / test::MaxAbs(logits[0]));
  EXPECT_LT(test::MaxAbsDiff(logits[0], logits[2]), 1e-1 * test::MaxAbs(logits[0]));
}

TEST(BenchCommand, RunsOnTheTinyFixtureAndPrintsJson) {
  const std::string out = test::TempDir("bench") + "/out.json";
  const std::string cmd = std::string(PHI4MM_CLI_PATH) + " bench -m " + test::FixturePath("tiny/orig") +
                          " --prompt-tokens 16 --decode-tokens 4 --vision-crops 1 --audio-seconds 1 --json > " + out;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const nlohmann::json j = nlohmann::json::parse(test::ReadFile(out));
  for (const char* k : {"machine", "load_seconds", "prefill", "decode", "lora", "vision", "audio", "memory"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_GT(j["machine"]["read_gb_per_s"].get<double>(), 0);
  EXPECT_GT(j["decode"]["ceiling_tok_per_s"].get<double>(), 0);
  EXPECT_EQ(j["lora"].size(), 3u);
  EXPECT_GT(j["memory"]["peak_rss_bytes"].get<int64_t>(), 0);
  // The encoders' ceilings follow their linears' format: bf16 as stored, Q8_0 under --quant q8
  // (int8 GEMMs, measured against the int8 peak, not the f32 one).
  const std::string out8 = test::TempDir("bench") + "/out8.json";
  const std::string cmd8 = std::string(PHI4MM_CLI_PATH) + " bench -m " + test::FixturePath("tiny/orig") +
                           " --quant q8 --lora none --prompt-tokens 8 --decode-tokens 2 --audio-seconds 1 --json > " +
                           out8;
  ASSERT_EQ(std::system(cmd8.c_str()), 0) << cmd8;
  const nlohmann::json j8 = nlohmann::json::parse(test::ReadFile(out8));
  for (const auto& [run, format] : {std::pair{&j, "bf16"}, std::pair{&j8, "q8_0"}})
    for (const char* part : {"vision", "audio"}) {
      const nlohmann::json& p = (*run)[part];
      EXPECT_EQ(p["linear_format"], format) << part;
      EXPECT_GT(p["ratio"].get<double>(), 0) << part;
      EXPECT_LE(p["ratio"].get<double>(), 1) << part << ": measured faster than its ceiling";
    }
}

TEST(BenchCommand, ConcurrencyStepProfileAddsUpInItsJson) {
  const std::string out = test::TempDir("bench_concurrency") + "/out.txt";
  const std::string cmd = std::string(PHI4MM_CLI_PATH) + " bench -m " + test::FixturePath("tiny/orig") +
                          " --concurrency 3,1,3 --prompt-tokens 8 --decode-tokens 5 --vision-crops 0 --rounds 2"
                          " --step-profile --json > " + out;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const std::string text = test::ReadFile(out);
  const size_t at = text.find("\n{");  // the table, then the JSON
  ASSERT_NE(at, std::string::npos) << text;
  const nlohmann::json j = nlohmann::json::parse(text.substr(at + 1));
  // The stream counts sorted and deduplicated: 1 stream, 3 streams, 3 mixed.
  ASSERT_EQ(j["runs"].size(), 3u);
  EXPECT_EQ(j["runs"][0]["streams"], 1);
  EXPECT_EQ(j["runs"][1]["streams"], 3);
  EXPECT_EQ(j["runs"][1]["lora"], "none");
  EXPECT_EQ(j["runs"][2]["lora"], "mixed");
  EXPECT_DOUBLE_EQ(j["runs"][0]["ratio_to_one_stream"].get<double>(), 1.0);
  for (const auto& run : j["runs"]) {
    ASSERT_TRUE(run.contains("step_profile_ms")) << run.dump();
    const auto& p = run["step_profile_ms"];
    double sum = 0;
    for (const char* k : {"qkv", "attention", "o", "gate_up", "swiglu", "down", "outside_layers", "lm_head", "sampling"}) {
      ASSERT_TRUE(p.contains(k)) << k;
      EXPECT_GE(p[k].get<double>(), 0) << k;
      sum += p[k].get<double>();
    }
    EXPECT_NEAR(p["total"].get<double>(), sum, 1e-9 * (1 + sum));
    EXPECT_GT(p["total"].get<double>(), 0);
    EXPECT_GE(p["rows_per_step"].get<double>(), 1.0);
    EXPECT_LE(p["rows_per_step"].get<double>(), run["streams"].get<double>());
  }
  EXPECT_NE(text.find("decode step, ms"), std::string::npos);
}

}  // namespace
}  // namespace phi4mm
