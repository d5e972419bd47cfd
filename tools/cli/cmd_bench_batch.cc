// `phi4mm bench --concurrency N[,N...]`: the batched engine under load, on random token ids so any
// checkpoint works. For each N it runs N text streams at once (prompt of --prompt-tokens, then
// --decode-tokens each) and reports the aggregate decode tok/s over the window where all N decode,
// the per-stream inter-token latency, the KV bytes reserved, and the ratio to one stream; then
// the same batch with the streams spread over the three LoRA modes (none / vision / speech) against
// the text-only batch; and the time to first token of an image request submitted while N streams
// decode, with the longest gap the streams saw meanwhile. Ceilings as in `phi4mm bench`: the read
// bandwidth bounds one stream (bytes per step ÷ bandwidth), the int8 / f32 peak bounds a batch.
#include <algorithm>
#include <cstdio>
#include <mutex>
#include <numeric>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "bench_util.h"
#include "cli_common.h"
#include "phi4mm/base/file_map.h"
#include "phi4mm/kernels/machine_peaks.h"
#include "phi4mm/runtime/engine.h"

namespace phi4mm::cli {

namespace {

struct StreamTimes {
  std::mutex mu;
  std::vector<Clock::time_point> tokens;
};

struct BatchRun {
  double aggregate_tps = 0;       // tokens/s over the window where every stream decodes
  double itl_mean_ms = 0, itl_p50_ms = 0, itl_max_ms = 0;
  double ttft_mean_s = 0;
  int64_t kv_reserved = 0;
  double image_ttft_s = -1;       // when an image request was added
  double stall_max_ms = 0;        // longest gap of a text stream while the image was encoded
  double constraint_ms_per_token = 0;  // the output constraint's masks and checks, per generated token
  Status status;
};

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
}

// Runs n streams; modes[i % modes.size()] picks each stream's LoRA mode. With `image` set, an image
// request is submitted once every stream decodes, and its time to first token is measured.
BatchRun RunBatch(Engine& engine, std::mt19937& rng, int64_t n, int64_t prompt, int64_t decode,
                  const std::vector<LoraMode>& modes, const Image* image, const OutputConstraint& constraint = {}) {
  BatchRun out;
  const int64_t vocab = engine.model().embedding().vocab_size();
  std::vector<std::unique_ptr<StreamTimes>> times;
  std::vector<RequestHandle> handles;
  std::vector<Clock::time_point> submitted;
  std::mutex kv_mu;
  int64_t kv_seen = 0;
  Engine* e = &engine;
  // Whatever way this returns, no request may outlive the state its callbacks write to.
  struct EndAll {
    std::vector<RequestHandle>* hs;
    ~EndAll() {
      for (RequestHandle& h : *hs) h.Cancel();
      for (RequestHandle& h : *hs) (void)h.Wait();
    }
  } end_all{&handles};
  for (int64_t i = 0; i < n; ++i) {
    times.push_back(std::make_unique<StreamTimes>());
    EngineRequest r;
    r.prompt_ids = RandomIds(rng, prompt, vocab);
    r.generate.max_new_tokens = decode;
    r.generate.stop_ids = {-1};
    r.generate.constraint = constraint;
    const LoraMode m = modes[static_cast<size_t>(i) % modes.size()];
    r.prompt_options.conversation_has_image = m == LoraMode::kVision;
    r.prompt_options.conversation_has_audio = m == LoraMode::kSpeech;
    StreamTimes* t = times.back().get();
    r.on_event = [t, e, &kv_mu, &kv_seen](const StreamEvent& ev) {
      if (ev.token < 0) return true;
      {
        std::lock_guard<std::mutex> l(t->mu);
        t->tokens.push_back(Clock::now());
      }
      const int64_t kv = e->stats().kv_reserved_bytes;
      std::lock_guard<std::mutex> l(kv_mu);
      kv_seen = std::max(kv_seen, kv);
      return true;
    };
    submitted.push_back(Clock::now());
    auto h = engine.Submit(std::move(r));
    if (!h.ok()) {
      out.status = h.status();
      return out;
    }
    handles.push_back(*h);
  }
  std::optional<RequestHandle> img_handle;
  Clock::time_point img_submit;
  if (image != nullptr) {
    // Wait until every stream has its first token, then add the image request.
    for (;;) {
      bool all = true;
      for (auto& t : times) {
        std::lock_guard<std::mutex> l(t->mu);
        all = all && !t->tokens.empty();
      }
      if (all) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    EngineRequest r;
    r.prompt = "<|user|><|image_1|>Describe the picture.<|end|><|assistant|>";
    r.media.images.push_back(*image);
    r.generate.max_new_tokens = 1;
    img_submit = Clock::now();
    auto h = engine.Submit(std::move(r));
    if (!h.ok()) {
      out.status = h.status();
      return out;
    }
    img_handle = *h;
    handles.push_back(*h);
  }
  double constraint_s = 0;
  int64_t generated = 0;
  for (size_t i = 0; i < times.size(); ++i) {
    auto r = handles[i].Wait();
    if (!r.ok()) {
      out.status = r.status();
      return out;
    }
    constraint_s += r->generation.constraint_seconds;
    generated += static_cast<int64_t>(r->generation.tokens.size());
  }
  if (generated > 0) out.constraint_ms_per_token = 1e3 * constraint_s / static_cast<double>(generated);
  if (img_handle) {
    auto r = img_handle->Wait();
    if (!r.ok()) {
      out.status = r.status();
      return out;
    }
    out.image_ttft_s = r->time_to_first_token;
  }
  // The window where every stream decodes: from the last first token to the first last token.
  Clock::time_point begin = Clock::time_point::min(), end = Clock::time_point::max();
  double ttft = 0;
  for (size_t i = 0; i < times.size(); ++i) {
    const auto& tk = times[i]->tokens;
    if (tk.size() < 2) continue;
    begin = std::max(begin, tk.front());
    end = std::min(end, tk.back());
    ttft += std::chrono::duration<double>(tk.front() - submitted[i]).count();
  }
  out.ttft_mean_s = ttft / static_cast<double>(times.size());
  int64_t in_window = 0;
  std::vector<double> gaps;
  const Clock::time_point img_done =
      img_handle ? img_submit + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(out.image_ttft_s))
                 : Clock::time_point::min();
  for (auto& t : times) {
    const auto& tk = t->tokens;
    for (size_t k = 0; k < tk.size(); ++k) {
      if (tk[k] > begin && tk[k] <= end) ++in_window;
      if (k == 0) continue;
      const double g = std::chrono::duration<double, std::milli>(tk[k] - tk[k - 1]).count();
      if (tk[k - 1] >= begin && tk[k] <= end) gaps.push_back(g);
      if (img_handle && tk[k] > img_submit && tk[k - 1] < img_done) out.stall_max_ms = std::max(out.stall_max_ms, g);
    }
  }
  const double window = std::chrono::duration<double>(end - begin).count();
  out.aggregate_tps = window > 0 ? static_cast<double>(in_window) / window : 0;
  if (!gaps.empty()) {
    out.itl_mean_ms = std::accumulate(gaps.begin(), gaps.end(), 0.0) / static_cast<double>(gaps.size());
    out.itl_p50_ms = Percentile(gaps, 0.5);
    out.itl_max_ms = *std::max_element(gaps.begin(), gaps.end());
  }
  out.kv_reserved = kv_seen;
  return out;
}

// The decode-only steps between two snapshots of the engine's profile: one line of ms per step by
// part; returns the same figures for the JSON.
// acc += b - a, part by part (the decode profile a figure's run added to the engine's totals).
void AddProfile(const EngineStats::DecodeProfile& a, const EngineStats::DecodeProfile& b, EngineStats::DecodeProfile* acc) {
  acc->steps += b.steps - a.steps;
  acc->rows += b.rows - a.rows;
  acc->decoder.qkv += b.decoder.qkv - a.decoder.qkv;
  acc->decoder.attention += b.decoder.attention - a.decoder.attention;
  acc->decoder.o += b.decoder.o - a.decoder.o;
  acc->decoder.gate_up += b.decoder.gate_up - a.decoder.gate_up;
  acc->decoder.activation += b.decoder.activation - a.decoder.activation;
  acc->decoder.down += b.decoder.down - a.decoder.down;
  acc->outside_layers += b.outside_layers - a.outside_layers;
  acc->lm_head += b.lm_head - a.lm_head;
  acc->sampling += b.sampling - a.sampling;
}

nlohmann::json PrintStepProfile(const EngineStats::DecodeProfile& a, const EngineStats::DecodeProfile& b) {
  const int64_t steps = b.steps - a.steps;
  if (steps <= 0) return nullptr;
  const double k = 1e3 / static_cast<double>(steps);
  const std::vector<std::pair<const char*, double>> parts = {
      {"qkv", b.decoder.qkv - a.decoder.qkv},
      {"attention", b.decoder.attention - a.decoder.attention},
      {"o", b.decoder.o - a.decoder.o},
      {"gate_up", b.decoder.gate_up - a.decoder.gate_up},
      {"swiglu", b.decoder.activation - a.decoder.activation},
      {"down", b.decoder.down - a.decoder.down},
      {"outside_layers", b.outside_layers - a.outside_layers},
      {"lm_head", b.lm_head - a.lm_head},
      {"sampling", b.sampling - a.sampling}};
  nlohmann::json j;
  double total = 0;
  std::string line;
  for (const auto& [name, s] : parts) {
    j[name] = s * k;
    total += s * k;
    line += std::string(" ") + name + Fmt(" %.1f", s * k);
  }
  j["total"] = total;
  j["rows_per_step"] = static_cast<double>(b.rows - a.rows) / static_cast<double>(steps);
  std::printf("       decode step, ms (%lld steps of %.1f rows on average):%s = %.1f\n", static_cast<long long>(steps),
              j["rows_per_step"].get<double>(), line.c_str(), total);
  return j;
}

// One prompt of `positions` random ids through the engine in prefill chunks, with the resident set
// sampled every 50 ms: peak RSS against the weights and the request's KV reservation. Stops at
// `seconds` (the deadline) if the prefill is not done by then; what was prefilled is reported.
int LongPromptMemory(const std::shared_ptr<const Model>& model, const BenchFlags& f) {
  EngineOptions eo;
  eo.max_running = 1;
  eo.prefill_chunk = f.prefill_chunk;
  eo.prefix_cache_bytes = 0;
  auto engine = Engine::Start(model, eo);
  if (!engine.ok()) return ReportError(engine.status());
  std::mt19937 rng(99);
  // Warm-up so the decoder's weights are resident before the baseline is read.
  {
    EngineRequest w;
    w.prompt_ids = RandomIds(rng, 8, model->embedding().vocab_size());
    w.generate.max_new_tokens = 2;
    auto h = (*engine)->Submit(std::move(w));
    if (!h.ok()) return ReportError(h.status());
    if (auto r = h->Wait(); !r.ok()) return ReportError(r.status());
  }
  const int64_t before = ResidentBytes();
  EngineRequest r;
  r.prompt_ids = RandomIds(rng, f.long_prompt, model->embedding().vocab_size());
  r.generate.max_new_tokens = 1;
  if (f.long_prompt_seconds > 0)
    r.deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(f.long_prompt_seconds * 1000));
  const auto t0 = Clock::now();
  auto h = (*engine)->Submit(std::move(r));
  if (!h.ok()) return ReportError(h.status());
  int64_t peak = before, kv = 0, rows_at_peak = 0;
  std::vector<std::pair<double, int64_t>> samples;  // (seconds, rss) once per ~10 s
  double next_sample = 0;
  while (!h->done()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const int64_t rss = ResidentBytes();
    const EngineStats st = (*engine)->stats();
    kv = std::max(kv, st.kv_reserved_bytes);
    if (rss > peak) {
      peak = rss;
      rows_at_peak = st.prefill_rows;
    }
    if (Since(t0) >= next_sample) {
      samples.push_back({Since(t0), rss});
      next_sample += 10;
    }
  }
  auto res = h->Wait();
  if (!res.ok()) return ReportError(res.status());
  const EngineStats st = (*engine)->stats();
  const double gb = 1e9;
  std::printf("long prompt: %lld positions requested, %lld prefilled in %.0f s (%s), prefill chunk %lld\n",
              static_cast<long long>(f.long_prompt), static_cast<long long>(st.prefill_rows - 8), Since(t0),
              FinishReasonName(res->generation.finish), static_cast<long long>(f.prefill_chunk));
  std::printf("RSS: %.2f GB with the weights resident before the request; KV reserved %.2f GB; peak %.2f GB "
              "(after %lld rows) = weights + KV + %.2f GB\n",
              before / gb, kv / gb, peak / gb, static_cast<long long>(rows_at_peak), (peak - before - kv) / gb);
  for (const auto& [t, rss] : samples) std::printf("  t=%5.0f s  RSS %.2f GB\n", t, rss / gb);
  return 0;
}

}  // namespace

int BatchBenchCommand(const BenchFlags& f) {
  std::vector<int64_t> ns;
  {
    std::stringstream ss(f.concurrency);
    std::string item;
    while (std::getline(ss, item, ',')) {
      char* endp = nullptr;
      const long v = std::strtol(item.c_str(), &endp, 10);
      if (item.empty() || *endp != '\0' || v < 1 || v > 256)
        return ReportError(InvalidArgument("--concurrency takes numbers of streams from 1 to 256 separated by commas, got '" +
                                           f.concurrency + "'"));
      ns.push_back(v);
    }
  }
  ns.push_back(1);  // the baseline
  std::sort(ns.begin(), ns.end());
  ns.erase(std::unique(ns.begin(), ns.end()), ns.end());
  if (f.prompt_tokens < 1 || f.decode_tokens < 2 || f.prefill_chunk < 1 || f.rounds < 1)
    return ReportError(
        InvalidArgument("--prompt-tokens must be >= 1, --decode-tokens >= 2, --prefill-chunk >= 1, --rounds >= 1"));
  nlohmann::json j;
  MachinePeaks peaks;
  {
    ThreadPool pool(f.model.threads);
    peaks = MeasureMachinePeaks(&pool);
  }
  auto loaded = LoadModel(f.model);
  if (!loaded.ok()) return ReportError(loaded.status());
  const std::shared_ptr<const Model> model = *loaded;
  if (f.long_prompt > 0) return LongPromptMemory(model, f);
  const Decoder& dec = model->decoder();
  const int64_t max_n = *std::max_element(ns.begin(), ns.end());
  EngineOptions eo;
  eo.max_running = max_n + 1;
  eo.max_queue = max_n + 1;
  eo.prefill_chunk = f.prefill_chunk;
  eo.prefix_cache_bytes = 0;  // random prompts never share a prefix
  eo.profile_steps = f.step_profile;
  auto engine = Engine::Start(model, eo);
  if (!engine.ok()) return ReportError(engine.status());
  std::mt19937 rng(4321);
  OutputConstraint constraint;
  if (!f.json_schema.empty()) {
    auto text = ReadFileToString(f.json_schema);
    if (!text.ok()) return ReportError(text.status().WithContext("--json-schema"));
    using Clock = std::chrono::steady_clock;
    const Clock::time_point t0 = Clock::now();
    auto compiler = model->grammar();
    if (!compiler.ok()) return ReportError(compiler.status());
    const Clock::time_point t1 = Clock::now();
    auto g = (*compiler)->JsonSchema(*text);
    if (!g.ok()) return ReportError(g.status().WithContext("--json-schema " + f.json_schema));
    const Clock::time_point t2 = Clock::now();
    auto again = (*compiler)->JsonSchema(*text);
    const Clock::time_point t3 = Clock::now();
    auto ms = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
    std::printf("grammar: vocabulary indexed in %.0f ms (once per model); schema compiled in %.1f ms cold, %.3f ms "
                "cached (%s)\n", ms(t0, t1), ms(t1, t2), ms(t2, t3), again.ok() && again->get() == g->get() ? "same grammar" : "?");
    j["grammar"] = {{"vocabulary_ms", ms(t0, t1)}, {"compile_cold_ms", ms(t1, t2)}, {"compile_cached_ms", ms(t2, t3)}};
    constraint.grammar = std::move(g).value();
  }
  // Warm-up: page in every decoder weight and both adapters.
  RunBatch(**engine, rng, 3, 8, 2, {LoraMode::kNone, LoraMode::kVision, LoraMode::kSpeech}, nullptr);

  const double compute_gops = ComputeCeilingGops(dec, peaks);
  const double read_gbps = std::max(peaks.read_gb_per_s, MeasureReadBandwidth(model->pool(), PeakOptions{}));
  const double step_bytes = DecodeWeightBytes(dec, LoraMode::kNone);
  const double flop_per_row = 2 * LinearMacsPerToken(dec) + 2.0 * static_cast<double>(dec.lm_head().rows()) *
                                                                static_cast<double>(dec.config().hidden_size);
  j["machine"] = {{"threads", peaks.threads},
                  {"isa", peaks.isa},
                  {"read_gb_per_s", read_gbps},
                  {"compute_gop_per_s", compute_gops}};
  j["runs"] = nlohmann::json::array();
  std::printf("phi4mm bench --concurrency: %s, %d threads, prompt %lld, decode %lld tokens per stream, prefill chunk %lld\n",
              peaks.isa, peaks.threads, static_cast<long long>(f.prompt_tokens),
              static_cast<long long>(f.decode_tokens), static_cast<long long>(f.prefill_chunk));
  std::printf("ceilings: read %.1f GB/s -> one stream %.2f tok/s; compute %.0f GOP/s -> %.1f tok/s for a full batch\n",
              read_gbps, read_gbps * 1e9 / step_bytes, compute_gops, compute_gops * 1e9 / flop_per_row);
  std::printf("%-6s %-8s %10s %8s %10s %10s %10s %10s %12s\n", "N", "lora", "agg tok/s", "x one", "itl ms",
              "itl p50", "itl max", "ttft s", "KV MiB");
  // The figures (each stream count text-only, and mixed from 3 streams up) are timed in
  // interleaved rounds, every figure once per round, and each keeps its best round: the machine's
  // slow periods then fall on all figures alike instead of on whichever ran during them, so the
  // ratios between figures (to one stream, mixed to text-only) hold up better than the figures.
  struct Figure {
    int64_t n = 0;
    bool mixed = false;
    BatchRun best;
    EngineStats::DecodeProfile spent;  // summed over the figure's rounds
  };
  std::vector<Figure> figures;
  for (int64_t n : ns)
    for (int mixed = 0; mixed < (n >= 3 && f.lora == "all" ? 2 : 1); ++mixed) figures.push_back({n, mixed == 1, {}, {}});
  for (int round = 0; round < f.rounds; ++round) {
    for (Figure& fig : figures) {
      const std::vector<LoraMode> modes = fig.mixed
                                              ? std::vector<LoraMode>{LoraMode::kNone, LoraMode::kVision, LoraMode::kSpeech}
                                              : std::vector<LoraMode>{LoraMode::kNone};
      const EngineStats::DecodeProfile before = (*engine)->stats().decode_profile;
      BatchRun r = RunBatch(**engine, rng, fig.n, f.prompt_tokens, f.decode_tokens, modes, nullptr, constraint);
      if (!r.status.ok()) return ReportError(r.status);
      AddProfile(before, (*engine)->stats().decode_profile, &fig.spent);
      if (r.aggregate_tps > fig.best.aggregate_tps) fig.best = r;
    }
  }
  const double base_tps = figures.front().best.aggregate_tps;  // one stream, text-only (ns is sorted)
  for (const Figure& fig : figures) {
    const int64_t n = fig.n;
    const BatchRun& best = fig.best;
    // Ceiling of a batch: the bytes of one step (adapters of the modes present) over the
    // bandwidth, or n rows of multiply-adds over the compute peak, whichever is slower.
    double bytes = step_bytes;
    if (fig.mixed) bytes += AdapterBytes(dec, LoraMode::kVision) + AdapterBytes(dec, LoraMode::kSpeech);
    const double step_s = std::max(bytes / (read_gbps * 1e9), static_cast<double>(n) * flop_per_row / (compute_gops * 1e9));
    const double ceil_tps = static_cast<double>(n) / step_s;
    j["runs"].push_back({{"streams", n},
                         {"lora", fig.mixed ? "mixed" : "none"},
                         {"aggregate_tok_per_s", best.aggregate_tps},
                         {"ratio_to_one_stream", best.aggregate_tps / base_tps},
                         {"ceiling_tok_per_s", ceil_tps},
                         {"itl_mean_ms", best.itl_mean_ms},
                         {"itl_p50_ms", best.itl_p50_ms},
                         {"itl_max_ms", best.itl_max_ms},
                         {"ttft_mean_s", best.ttft_mean_s},
                         {"kv_reserved_bytes", best.kv_reserved}});
    std::printf("%-6lld %-8s %10.2f %8.2f %10.1f %10.1f %10.1f %10.2f %12.1f   (ceiling %.1f tok/s)\n",
                static_cast<long long>(n), fig.mixed ? "mixed" : "none", best.aggregate_tps, best.aggregate_tps / base_tps,
                best.itl_mean_ms, best.itl_p50_ms, best.itl_max_ms, best.ttft_mean_s,
                static_cast<double>(best.kv_reserved) / (1 << 20), ceil_tps);
    if (f.step_profile) j["runs"].back()["step_profile_ms"] = PrintStepProfile(EngineStats::DecodeProfile{}, fig.spent);
    if (constraint.active()) {
      // Each stream's constraint runs once per decode step (on the engine thread), so a step of n
      // streams spends n times the per-token figure on it; the step lasts one inter-token gap.
      const double step_ms = best.constraint_ms_per_token * static_cast<double>(n);
      std::printf("       grammar: %.3f ms per token, %.3f ms per step = %.2f %% of the %.1f ms step\n",
                  best.constraint_ms_per_token, step_ms, 100.0 * step_ms / best.itl_mean_ms, best.itl_mean_ms);
      j["runs"].back()["grammar_ms_per_token"] = best.constraint_ms_per_token;
      j["runs"].back()["grammar_share_of_step"] = step_ms / best.itl_mean_ms;
    }
  }
  if (f.vision_crops > 0) {
    const ModelConfig& mc = model->config();
    Image img;
    // (448·crops) x 224: `crops` HD crops plus the global view through the encoder, with half of
    // each HD crop's rows in the prompt (so it also fits the tiny fixture's 512-token context).
    img.width = mc.vision.crop_size * f.vision_crops;
    img.height = mc.vision.crop_size / 2;
    img.rgb.resize(static_cast<size_t>(img.width * img.height * 3));
    for (uint8_t& b : img.rgb) b = static_cast<uint8_t>(rng());
    for (int64_t n : ns) {
      BatchRun r = RunBatch(**engine, rng, n, f.prompt_tokens, f.decode_tokens * 4, {LoraMode::kNone}, &img);
      if (!r.status.ok()) return ReportError(r.status);
      j["image_while_decoding"].push_back(
          {{"streams", n}, {"image_ttft_s", r.image_ttft_s}, {"stream_stall_max_ms", r.stall_max_ms}});
      std::printf("image (%lld crop%s) submitted while %lld streams decode: time to first token %.2f s, longest "
                  "stream gap meanwhile %.0f ms\n",
                  static_cast<long long>(f.vision_crops), f.vision_crops == 1 ? "" : "s", static_cast<long long>(n),
                  r.image_ttft_s, r.stall_max_ms);
    }
  }
  const EngineStats st = (*engine)->stats();
  j["engine"] = {{"steps", st.steps}, {"batch_rows", st.batch_rows}, {"vision_crops", st.vision_crops}};
  j["peak_rss_bytes"] = PeakResidentBytes();
  const FilePages files = MappedFilePages();
  j["file_resident_bytes"] = files.resident;
  j["file_huge_page_bytes"] = files.huge;
  std::printf("peak RSS %s GB\n", Fmt("%.2f", static_cast<double>(PeakResidentBytes()) / 1e9).c_str());
  std::printf("%s\n", FilePagesLine(files).c_str());
  if (f.json) std::printf("%s\n", j.dump(2).c_str());
  return 0;
}

}  // namespace phi4mm::cli
