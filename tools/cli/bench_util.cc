// Benchmark helpers: timing, number formatting, the weight-file page line, random prompts, decode
// bytes and multiply-adds.
#include "bench_util.h"

#include <algorithm>
#include <cstdio>

#include "phi4mm/tokenizer/chat_format.h"

namespace phi4mm::cli {

std::string Fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string FilePagesLine(const FilePages& p) {
  std::string s = "weight files resident " + Fmt("%.2f", static_cast<double>(p.resident) / 1e9) + " GB, " +
                  Fmt("%.0f", p.resident > 0 ? 100.0 * static_cast<double>(p.huge) / static_cast<double>(p.resident) : 0.0) +
                  "% of it mapped in 2 MiB pages";
  if (p.resident > (int64_t{1} << 30) && p.huge * 2 < p.resident)
    s += " (the page cache holds most of them in 4 KiB pages, which slows decode; see docs/benchmarks.md, \"Weights "
         "in huge pages\")";
  return s;
}

std::vector<int32_t> RandomIds(std::mt19937& rng, int64_t n, int64_t vocab) {
  const int32_t hi = static_cast<int32_t>(std::min<int64_t>(vocab, 199999)) - 1;
  std::uniform_int_distribution<int32_t> d(0, std::max(hi, 0));
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int32_t& id : ids) {
    do id = d(rng);
    while (id == kImageTokenId || id == kAudioTokenId);
  }
  return ids;
}

double AdapterBytes(const Decoder& dec, LoraMode mode) {
  double b = 0;
  for (const auto& L : dec.layers())
    for (const LoraLinear* l : {&L.qkv, &L.o, &L.gate_up, &L.down})
      if (const LoraAdapter* a = l->adapter(mode)) b += static_cast<double>(a->a.bytes() + a->b.bytes());
  return b;
}

double DecodeWeightBytes(const Decoder& dec, LoraMode mode) {
  // weight_bytes() counts an untied lm_head; a tied one is the embedding table.
  double b = static_cast<double>(dec.weight_bytes(false));
  if (dec.config().tie_word_embeddings)
    b += static_cast<double>(dec.lm_head().bytes());
  return b + AdapterBytes(dec, mode);
}

double LinearMacsPerToken(const Decoder& dec) {
  double m = 0;
  for (const auto& L : dec.layers())
    for (const LoraLinear* l : {&L.qkv, &L.o, &L.gate_up, &L.down})
      m += static_cast<double>(l->out_features()) * static_cast<double>(l->in_features());
  return m;
}

double ComputeCeilingGops(const Decoder& dec, const MachinePeaks& peaks) {
  return ComputeCeilingGops(dec.layers().front().gate_up.base().format(), peaks);
}

double ComputeCeilingGops(WeightFormat format, const MachinePeaks& peaks) {
  switch (format) {
    case WeightFormat::kQ4K: return 2 * peaks.int8_gmac_per_s;
    case WeightFormat::kQ8_0: return 2 * peaks.int8_q8_gmac_per_s;
    default: return peaks.f32_gflop_per_s;
  }
}

}  // namespace phi4mm::cli
