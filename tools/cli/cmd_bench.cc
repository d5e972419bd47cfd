// `phi4mm bench`: an end-to-end benchmark on any checkpoint (random token ids and synthetic media,
// so the tiny fixture works too). It measures the machine's ceilings in the same run (read
// bandwidth, f32 FMA and int8 multiply-add peaks; kernels/machine_peaks.h) and prints every figure
// next to its ceiling: prefill against FLOP per token ÷ compute peak, decode against the bytes a
// token reads (the loaded matrices' real formats, lm_head, active LoRA adapters and KV cache) ÷
// bandwidth, decode per LoRA mode against text-only, the vision encoder per 448² crop and the speech
// encoder's real-time factor (against the compute peak of their linears' format), load time, peak
// RSS and KV-cache size. Everything is warmed up once before it is timed. A compact table by
// default, --json for machines.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "bench_util.h"
#include "cli_common.h"
#include "phi4mm/kernels/machine_peaks.h"
#include "phi4mm/kernels/quant_kernels.h"

namespace phi4mm::cli {

namespace {

struct Timed {
  double seconds = 0;
  Status status;
};

// Times `n` single-token appends (decode steps) on `s`.
Timed DecodeSteps(Session& s, std::mt19937& rng, int64_t n, LoraMode mode) {
  Timed t;
  const auto t0 = Clock::now();
  for (int64_t i = 0; i < n && t.status.ok(); ++i)
    t.status = s.Append(RandomIds(rng, 1, s.model().embedding().vocab_size()), mode);
  t.seconds = Since(t0);
  return t;
}

}  // namespace

void BenchFlags::Register(CLI::App* app) {
  model.Register(app);
  app->add_option("--prompt-tokens", prompt_tokens, "Prefill length (random token ids)")->capture_default_str();
  app->add_option("--decode-tokens", decode_tokens, "Decode steps timed per measurement")->capture_default_str();
  app->add_option("--lora", lora, "LoRA modes to time decode in: none, vision, speech or all")->capture_default_str();
  app->add_option("--vision-crops", vision_crops, "HD crops of the synthetic image (0 skips vision)")
      ->capture_default_str();
  app->add_option("--audio-seconds", audio_seconds, "Length of the synthetic clip (0 skips audio)")
      ->capture_default_str();
  app->add_flag("--json", json, "Print JSON instead of the table");
  app->add_option("--concurrency", concurrency,
                  "Benchmark the batched engine instead: aggregate decode with N concurrent streams (e.g. 1,4,8), "
                  "mixed LoRA modes, and an image request's time to first token while they decode");
  app->add_option("--prefill-chunk", prefill_chunk, "With --concurrency: prompt rows per engine step")
      ->capture_default_str();
  app->add_option("--rounds", rounds, "With --concurrency: rounds over all figures, interleaved (each figure keeps its best round)")->capture_default_str();
  app->add_flag("--step-profile", step_profile,
                "With --concurrency: also print where a decode step's time goes (ms per step by part, over every "
                "decode-only step of a figure's rounds)");
  app->add_option("--json-schema", json_schema,
                  "With --concurrency: every stream's answer follows this JSON Schema; prints the schema's compile "
                  "time (cold and cached) and the grammar's time per token against the decode step");
  app->add_option("--long-prompt", long_prompt,
                  "With --concurrency: instead, prefill one prompt of this many positions and report peak RSS against "
                  "the weights and its KV cache");
  app->add_option("--long-prompt-seconds", long_prompt_seconds,
                  "With --long-prompt: stop the prefill after this long (0 = run it whole)");
  app->add_option("--speculative", speculative,
                  "ngram: instead, one greedy answer to a copying prompt plain, with prompt-lookup drafts and with a "
                  "right prediction: decode tok/s against plain, acceptance, tokens per step")
      ->check(CLI::IsMember({"ngram"}));
  app->add_option("--prompts", speculative_prompts,
                  "With --speculative: instead, answer each line of this file (a user turn) plain and with drafts");
  app->add_option("--draft-max", draft_max, "With --speculative: drafted tokens per step, at most")
      ->check(CLI::Range(1, kMaxDraft))
      ->capture_default_str();
}

int BenchCommand(const BenchFlags& f) {
  if (!f.speculative.empty()) return SpeculativeBenchCommand(f);
  if (!f.concurrency.empty() || f.long_prompt > 0) return BatchBenchCommand(f);
  const std::optional<QuantMode> quant = ParseQuantMode(f.model.quant);
  if (!quant) return ReportError(InvalidArgument("--quant must be none, bf16, q8, q4 or q4m, got '" + f.model.quant + "'"));
  const Result<std::optional<KvDType>> kv = ParseKvDTypeFlag(f.model.kv_dtype);
  if (!kv.ok()) return ReportError(kv.status());
  std::vector<LoraMode> modes;
  if (f.lora == "all") modes = {LoraMode::kNone, LoraMode::kVision, LoraMode::kSpeech};
  else if (f.lora == "none") modes = {LoraMode::kNone};
  else if (f.lora == "vision") modes = {LoraMode::kNone, LoraMode::kVision};
  else if (f.lora == "speech") modes = {LoraMode::kNone, LoraMode::kSpeech};
  else return ReportError(InvalidArgument("--lora must be none, vision, speech or all, got '" + f.lora + "'"));
  if (f.prompt_tokens < 1 || f.decode_tokens < 1 || f.vision_crops < 0 || f.audio_seconds < 0)
    return ReportError(InvalidArgument("--prompt-tokens and --decode-tokens must be >= 1, media sizes >= 0"));

  nlohmann::json j;
  MachinePeaks peaks;
  {
    ThreadPool pool(f.model.threads);
    peaks = MeasureMachinePeaks(&pool);
  }
  j["machine"] = {{"threads", peaks.threads},
                  {"isa", peaks.isa},
                  {"read_gb_per_s", peaks.read_gb_per_s},
                  {"f32_gflop_per_s", peaks.f32_gflop_per_s},
                  {"int8_gmac_per_s", peaks.int8_gmac_per_s},
                  {"int8_q8_gmac_per_s", peaks.int8_q8_gmac_per_s}};

  LoadOptions lo;
  lo.num_threads = f.model.threads;
  lo.quant = *quant;
  lo.kv_dtype = *kv;
  auto t0 = Clock::now();
  auto loaded = Model::Load(f.model.dir, lo);
  if (!loaded.ok()) return ReportError(loaded.status());
  const std::shared_ptr<const Model> model = *loaded;
  j["load_seconds"] = Since(t0);
  // A folder written by `phi4mm quantize` runs in its own mode (the --quant default keeps it).
  const std::string& pre = model->checkpoint().prequantized();
  const std::string quant_label = pre.empty() ? QuantModeName(*quant) : pre + " (pre-quantized)";
  j["quant"] = quant_label;
  const Decoder& dec = model->decoder();
  const TextConfig& tc = dec.config();
  const int64_t vocab = model->embedding().vocab_size();
  const double compute_gops = ComputeCeilingGops(dec, peaks);
  std::mt19937 rng(1234);

  // Warm-up: page in and touch every decoder weight once.
  {
    Session w(model);
    if (Status st = w.Append(RandomIds(rng, std::min<int64_t>(16, f.prompt_tokens), vocab), LoraMode::kNone); !st.ok())
      return ReportError(st);
    if (Status st = DecodeSteps(w, rng, 2, LoraMode::kNone).status; !st.ok()) return ReportError(st);
  }

  // Prefill of --prompt-tokens, then decode at that context.
  const int64_t P = f.prompt_tokens, N = f.decode_tokens;
  Session s(model);
  t0 = Clock::now();
  if (Status st = s.Append(RandomIds(rng, P, vocab), LoraMode::kNone); !st.ok()) return ReportError(st);
  const double prefill_s = Since(t0);
  const double attn_flop_per_pos = 4.0 * tc.num_attention_heads * tc.head_dim * tc.num_hidden_layers;
  const double prefill_flop = 2 * LinearMacsPerToken(dec) + attn_flop_per_pos * (P + 1) / 2.0 +
                              2.0 * static_cast<double>(vocab) * tc.hidden_size / static_cast<double>(P);
  const double prefill_tps = P / prefill_s, prefill_ceil = compute_gops * 1e9 / prefill_flop;
  j["prefill"] = {{"tokens", P},
                  {"seconds", prefill_s},
                  {"tok_per_s", prefill_tps},
                  {"gflop_per_token", prefill_flop / 1e9},
                  {"ceiling_tok_per_s", prefill_ceil},
                  {"ratio", prefill_tps / prefill_ceil}};
  // Decode at that context: the best of kRounds runs of N steps (like the ceilings, which are best
  // of several trials, so a moment of interference on this VM does not count against the kernels).
  // The read bandwidth is measured again before every round and the ceiling is the best of all
  // measurements: this VM's bandwidth drifts by up to 20% over a run, and a ceiling read only at
  // the start could sit below what a later round had.
  PeakOptions bw_opts;
  bw_opts.trials = 3;
  double read_gbps = peaks.read_gb_per_s;
  auto refresh_read_ceiling = [&] { read_gbps = std::max(read_gbps, MeasureReadBandwidth(model->pool(), bw_opts)); };
  constexpr int kRounds = 3;
  double decode_tps = 0;
  for (int round = 0; round < kRounds; ++round) {
    refresh_read_ceiling();
    const Timed d = DecodeSteps(s, rng, N, LoraMode::kNone);
    if (!d.status.ok()) return ReportError(d.status);
    decode_tps = std::max(decode_tps, N / d.seconds);
  }
  const double kv_tok = static_cast<double>(dec.kv_bytes_per_token());
  const double decode_bytes = DecodeWeightBytes(dec, LoraMode::kNone) + kv_tok * (P + kRounds * N / 2.0);

  // Decode per LoRA mode, each in its own session after a short prompt in that mode. The modes are
  // timed in interleaved rounds (none, vision, speech, none, ...) and each keeps its best round, so
  // a drift of this VM's bandwidth during the run moves every mode alike instead of skewing the
  // ratios to text-only.
  j["lora"] = nlohmann::json::array();
  const int64_t short_p = std::min<int64_t>(16, P);
  std::vector<std::unique_ptr<Session>> sessions;
  for (LoraMode m : modes) {
    sessions.push_back(std::make_unique<Session>(model));
    if (Status st = sessions.back()->Append(RandomIds(rng, short_p, vocab), m); !st.ok()) return ReportError(st);
    if (Status st = DecodeSteps(*sessions.back(), rng, 1, m).status; !st.ok()) return ReportError(st);
  }
  std::vector<double> best(modes.size(), 0.0);
  for (int round = 0; round < kRounds; ++round)
    for (size_t k = 0; k < modes.size(); ++k) {
      refresh_read_ceiling();
      const Timed t = DecodeSteps(*sessions[k], rng, N, modes[k]);
      if (!t.status.ok()) return ReportError(t.status);
      best[k] = std::max(best[k], N / t.seconds);
    }
  sessions.clear();
  j["machine"]["read_gb_per_s"] = read_gbps;
  const double decode_ceil = read_gbps * 1e9 / decode_bytes;
  j["decode"] = {{"tokens", N},
                 {"context", P},
                 {"tok_per_s", decode_tps},
                 {"bytes_per_token", decode_bytes},
                 {"ceiling_tok_per_s", decode_ceil},
                 {"ratio", decode_tps / decode_ceil}};
  double text_tps = 0;
  for (size_t k = 0; k < modes.size(); ++k) {
    const LoraMode m = modes[k];
    const double tps = best[k];
    const double bytes = DecodeWeightBytes(dec, m) + kv_tok * (short_p + 1 + kRounds * N / 2.0);
    const double ceil = read_gbps * 1e9 / bytes;
    if (m == LoraMode::kNone) text_tps = tps;
    j["lora"].push_back({{"mode", LoraModeName(m)},
                         {"tok_per_s", tps},
                         {"bytes_per_token", bytes},
                         {"adapter_bytes", AdapterBytes(dec, m)},
                         {"ceiling_tok_per_s", ceil},
                         {"ratio", tps / ceil},
                         {"ratio_to_text", tps / text_tps}});
  }
  // Resident set with the text model in use (every LoRA mode decoded), before any encoder loads; the
  // current value, not the peak, which the bandwidth measurements' transient buffer would inflate.
  const int64_t rss_text = ResidentBytes();
  const FilePages files_text = MappedFilePages();

  // Vision: a (448·crops) x 448 synthetic image at dynamic_hd = crops (crops HD crops + the global view).
  const ModelConfig& mc = model->config();
  if (f.vision_crops > 0) {
    Image img;
    img.width = mc.vision.crop_size * f.vision_crops;
    img.height = mc.vision.crop_size;
    img.rgb.resize(static_cast<size_t>(img.width * img.height * 3));
    for (uint8_t& b : img.rgb) b = static_cast<uint8_t>(rng());
    ImageProcessorOptions io;
    io.dynamic_hd = f.vision_crops;
    io.crop_size = mc.vision.crop_size;
    io.patch_size = mc.vision.patch_size;
    auto pi = ProcessImage(img, io);
    if (!pi.ok()) return ReportError(pi.status());
    t0 = Clock::now();
    auto vision = model->vision();
    if (!vision.ok()) return ReportError(vision.status());
    const double vload = Since(t0);
    auto warm = (*vision)->Encode(*pi, model->pool(), nullptr, "");
    if (!warm.ok()) return ReportError(warm.status());
    t0 = Clock::now();
    auto enc = (*vision)->Encode(*pi, model->pool(), nullptr, "");
    if (!enc.ok()) return ReportError(enc.status());
    const double vs = Since(t0);
    const VisionConfig& v = mc.vision;
    const double patches = std::pow(static_cast<double>(v.crop_size / v.patch_size), 2);
    const int64_t layers = v.feature_layer < 0 ? v.num_hidden_layers + 1 + v.feature_layer : v.feature_layer;
    const double h = static_cast<double>(v.hidden_size);
    // The layers' linears run at the compute ceiling of their format (int8 for Q8_0 under q8 and
    // q4), their attention products (4·P²·h) in f32.
    const double linear_flop = layers * 2 * patches * (4 * h * h + 2 * h * v.intermediate_size);
    const double attn_flop = layers * 4 * patches * patches * h, flop_crop = linear_flop + attn_flop;
    const WeightFormat vfmt = (*vision)->linear_format();
    const double ceil =
        linear_flop / (ComputeCeilingGops(vfmt, peaks) * 1e9) + attn_flop / (peaks.f32_gflop_per_s * 1e9);
    const double per_crop = vs / static_cast<double>(pi->num_crops);
    j["vision"] = {{"crops", pi->num_crops},   {"load_seconds", vload},     {"seconds", vs},
                   {"seconds_per_crop", per_crop}, {"gflop_per_crop", flop_crop / 1e9},
                   {"linear_format", WeightFormatName(vfmt)},
                   {"ceiling_seconds_per_crop", ceil}, {"ratio", ceil / per_crop}};
  }

  // Audio: a synthetic clip (tone + noise) through the features and the speech encoder.
  if (f.audio_seconds > 0) {
    AudioClip clip;
    clip.sample_rate = 16000;
    clip.samples.resize(static_cast<size_t>(f.audio_seconds * clip.sample_rate));
    std::normal_distribution<float> noise(0.0f, 0.05f);
    for (size_t i = 0; i < clip.samples.size(); ++i)
      clip.samples[i] = 0.3f * std::sin(2.0f * 3.14159265f * 440.0f * static_cast<float>(i) / 16000.0f) + noise(rng);
    AudioFeatureOptions ao;
    ao.compression_rate = mc.preprocessor.audio_compression_rate;
    ao.downsample_rate = mc.preprocessor.audio_downsample_rate;
    t0 = Clock::now();
    auto speech = model->speech();
    if (!speech.ok()) return ReportError(speech.status());
    const double sload = Since(t0);
    Timed warm, timed;
    for (Timed* t : {&warm, &timed}) {
      t0 = Clock::now();
      auto feats = ComputeAudioFeatures(clip, ao);
      if (!feats.ok()) return ReportError(feats.status());
      auto enc = (*speech)->Encode(*feats, false, model->pool(), nullptr, "");
      if (!enc.ok()) return ReportError(enc.status());
      t->seconds = Since(t0);
    }
    const AudioConfig& a = mc.audio;
    const double dd = static_cast<double>(a.hidden_size);
    // Conformer blocks only: two FFNs (gate_up [2I, D] and down [D, I]: 3·D·I each), the four
    // attention projections and the conv module's pointwise layers (GLU [2D, D], two [D, D]): 8·D².
    const double macs_frame = a.num_blocks * (6 * dd * a.intermediate_size + 8 * dd * dd);
    const double frames_per_s = 100.0 / static_cast<double>(a.time_reduction);
    // At the compute ceiling of the linears' format (int8 for Q8_0 under q8 and q4).
    const WeightFormat afmt = (*speech)->linear_format();
    const double ceil_rtf = 2 * macs_frame * frames_per_s / (ComputeCeilingGops(afmt, peaks) * 1e9);
    const double rtf = timed.seconds / f.audio_seconds;
    j["audio"] = {{"audio_seconds", f.audio_seconds}, {"load_seconds", sload},
                  {"seconds", timed.seconds},         {"rtf", rtf},
                  {"linear_format", WeightFormatName(afmt)},
                  {"ceiling_rtf", ceil_rtf},          {"ratio", ceil_rtf / rtf}};
  }

  j["memory"] = {{"peak_rss_bytes", PeakResidentBytes()},
                 {"rss_text_only_bytes", rss_text},
                 {"rss_now_bytes", ResidentBytes()},
                 {"file_resident_bytes_text", files_text.resident},
                 {"file_huge_page_bytes_text", files_text.huge},
                 {"decoder_weight_bytes", DecodeWeightBytes(dec, LoraMode::kNone)},
                 {"kv_dtype", KvDTypeName(dec.kv_dtype())},
                 {"kv_bytes_per_token", dec.kv_bytes_per_token()},
                 {"kv_cache_bytes", s.kv_cache_bytes()}};

  if (f.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  const auto& m = j["machine"];
  std::printf("machine: %d threads (kernels %s), read %.1f GB/s, f32 %.1f GFLOP/s, int8 %.1f GMAC/s",
              m["threads"].get<int>(), peaks.isa, read_gbps, peaks.f32_gflop_per_s, peaks.int8_gmac_per_s);
  if (peaks.int8_q8_gmac_per_s != peaks.int8_gmac_per_s)
    std::printf(" (Q8_0 tile's mix %.1f)", peaks.int8_q8_gmac_per_s);
  std::printf("\n");
  std::printf("model: %s, quant %s, KV %s, loaded in %.2f s\n", f.model.dir.c_str(), quant_label.c_str(),
              KvDTypeName(dec.kv_dtype()), j["load_seconds"].get<double>());
  std::printf("%-28s %12s %12s %8s\n", "figure", "measured", "ceiling", "ratio");
  auto row = [](const std::string& name, double v, double c, double r, const char* f) {
    std::printf("%-28s %12s %12s %7.0f%%\n", name.c_str(), Fmt(f, v).c_str(), Fmt(f, c).c_str(), 100 * r);
  };
  const auto& pj = j["prefill"];
  row("prefill " + std::to_string(P) + " tok (tok/s)", pj["tok_per_s"], pj["ceiling_tok_per_s"], pj["ratio"], "%.2f");
  const auto& dj = j["decode"];
  row("decode @" + std::to_string(P) + " (tok/s)", dj["tok_per_s"], dj["ceiling_tok_per_s"], dj["ratio"], "%.2f");
  for (const auto& l : j["lora"]) {
    row("decode lora " + l["mode"].get<std::string>() + " (tok/s)", l["tok_per_s"], l["ceiling_tok_per_s"], l["ratio"],
        "%.2f");
    std::printf("%-28s %12s   adapters %.2f GB\n", "  vs text-only",
                Fmt("%.0f%%", 100 * l["ratio_to_text"].get<double>()).c_str(), l["adapter_bytes"].get<double>() / 1e9);
  }
  if (j.contains("vision"))
    row("vision (s/crop)", j["vision"]["seconds_per_crop"], j["vision"]["ceiling_seconds_per_crop"],
        j["vision"]["ratio"], "%.2f");
  if (j.contains("audio")) row("audio (RTF)", j["audio"]["rtf"], j["audio"]["ceiling_rtf"], j["audio"]["ratio"], "%.3f");
  const auto& mm = j["memory"];
  std::printf("decode reads %.2f GB/token (weights %.2f GB); KV %s %lld B/token, cache %.1f MiB\n",
              dj["bytes_per_token"].get<double>() / 1e9, mm["decoder_weight_bytes"].get<double>() / 1e9,
              KvDTypeName(dec.kv_dtype()), static_cast<long long>(dec.kv_bytes_per_token()),
              static_cast<double>(s.kv_cache_bytes()) / (1 << 20));
  std::printf("peak RSS %.2f GB (after text decode, before the encoders: %.2f GB)\n", static_cast<double>(PeakResidentBytes()) / 1e9,
              static_cast<double>(rss_text) / 1e9);
  std::printf("after text decode: %s\n", FilePagesLine(files_text).c_str());
  return 0;
}

}  // namespace phi4mm::cli
