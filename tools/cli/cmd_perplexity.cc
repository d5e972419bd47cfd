// `phi4mm perplexity`: perplexity of a text file over windows of --ctx positions and, against a
// reference written by an earlier run (--save-logits, usually with --quant none) or by
// `llama-perplexity --kl-divergence-base`, the KL divergence statistics `llama-perplexity
// --kl-divergence` prints (runtime/perplexity.h has the scoring; docs/quant-quality.md the results).
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli_common.h"
#include "phi4mm/runtime/perplexity.h"

namespace phi4mm::cli {

void PerplexityFlags::Register(CLI::App* app) {
  model.Register(app);
  app->add_option("-f,--file", text_file, "UTF-8 text to score (tokenized as is: no BOS, no chat template)");
  app->add_option("--ctx", context, "Window length in positions; the second half of each window is scored")
      ->capture_default_str();
  app->add_option("--chunks", chunks, "Score at most this many windows (0 = all)")->capture_default_str();
  app->add_option("--lora", lora, "LoRA mode of every window: none, vision, speech")->capture_default_str();
  app->add_option("--save-logits", save, "Write the log-probabilities of every scored position here (the "
                                         "reference for --kl-reference; llama-perplexity's format)");
  app->add_option("--kl-reference", reference, "Score against this reference (from --save-logits or "
                                               "llama-perplexity --kl-divergence-base) and print KL statistics");
  app->add_flag("--json", json, "Print the results as JSON");
}

namespace {

// Weight bytes and parameters of the decoder and the embedding / lm_head, as the model runs them.
void PrintWeights(const Model& m, bool json) {
  const ModelInfo info = m.Info();
  const double params = static_cast<double>(info.params_embedding + info.params_decoder);
  const double bytes = static_cast<double>(m.decoder().weight_bytes(false) + m.embedding().matrix().bytes());
  if (json) {
    std::printf("\"weight_bytes\": %.0f, \"params\": %.0f, \"bits_per_weight\": %.4f, ", bytes, params,
                8 * bytes / params);
  } else {
    std::printf("weights: %.2f MiB for %.3f M parameters (decoder + embedding) = %.3f bits per weight\n",
                bytes / (1024 * 1024), params / 1e6, 8 * bytes / params);
  }
}

}  // namespace

int PerplexityCommand(const PerplexityFlags& f) {
  if (f.text_file.empty() && f.reference.empty())
    return ReportError(InvalidArgument("give the text to score with -f (or a --kl-reference, whose tokens are used)"));
  PerplexityOptions opts;
  opts.context = f.context;
  opts.max_chunks = f.chunks;
  opts.save_path = f.save;
  opts.reference_path = f.reference;
  if (f.lora == "none") opts.mode = LoraMode::kNone;
  else if (f.lora == "vision") opts.mode = LoraMode::kVision;
  else if (f.lora == "speech") opts.mode = LoraMode::kSpeech;
  else return ReportError(InvalidArgument("--lora must be none, vision or speech, got '" + f.lora + "'"));

  auto model = LoadModel(f.model);
  if (!model.ok()) return ReportError(model.status());
  std::vector<int32_t> ids;
  if (!f.text_file.empty()) {
    std::ifstream in(f.text_file, std::ios::binary);
    if (!in) return ReportError(NotFound("cannot open the text file '" + f.text_file + "'"));
    std::stringstream ss;
    ss << in.rdbuf();
    auto enc = (*model)->tokenizer().Encode(ss.str());
    if (!enc.ok()) return ReportError(enc.status().WithContext("tokenizing '" + f.text_file + "'"));
    ids = std::move(*enc);
    if (!f.json) std::fprintf(stderr, "[phi4mm] %s: %zu tokens\n", f.text_file.c_str(), ids.size());
  }
  if (f.model.verbose) {
    opts.progress = [](int64_t done, int64_t all) {
      std::fprintf(stderr, "\r[phi4mm] window %lld/%lld", static_cast<long long>(done), static_cast<long long>(all));
      if (done == all) std::fprintf(stderr, "\n");
    };
  }
  auto r = EvaluatePerplexity(**model, ids, opts);
  if (!r.ok()) return ReportError(r.status());
  const PerplexityResult& p = *r;
  if (f.json) {
    std::printf("{\"quant\": \"%s\", \"kv_dtype\": \"%s\", \"lora\": \"%s\", \"context\": %lld, \"chunks\": %lld, "
                "\"scored\": %lld, ", f.model.quant.c_str(), (*model)->Info().kv_dtype.c_str(), f.lora.c_str(),
                static_cast<long long>(p.context), static_cast<long long>(p.chunks),
                static_cast<long long>(p.scored));
    PrintWeights(**model, true);
    std::printf("\"ppl\": %.6f, \"ppl_error\": %.6f", p.ppl, p.ppl_error);
    if (p.kl) {
      const KlSummary& k = *p.kl;
      std::printf(", \"ppl_base\": %.6f, \"ln_ppl_ratio\": %.6f, \"mean_kld\": %.6f, \"mean_kld_error\": %.6f, "
                  "\"median_kld\": %.6f, \"p90_kld\": %.6f, \"p99_kld\": %.6f, \"p999_kld\": %.6f, \"max_kld\": %.6f, "
                  "\"same_top\": %.6f, \"same_top_error\": %.6f",
                  k.ppl_base, k.ln_ppl_ratio.mean, k.kld.mean, k.kld.stderr_, k.kld_median, k.kld_p90, k.kld_p99,
                  k.kld_p999, k.kld_max, k.same_top.mean, k.same_top.stderr_);
    }
    std::printf("}\n");
    return 0;
  }
  std::printf("%lld windows of %lld positions, %lld scored tokens (the second half of each window), LoRA %s, "
              "KV %s\n",
              static_cast<long long>(p.chunks), static_cast<long long>(p.context), static_cast<long long>(p.scored),
              f.lora.c_str(), (*model)->Info().kv_dtype.c_str());
  PrintWeights(**model, false);
  std::printf("Mean PPL: %10.4f +/- %.4f\n", p.ppl, p.ppl_error);
  if (p.kl) {
    const KlSummary& k = *p.kl;
    std::printf("Reference PPL: %10.4f\n", k.ppl_base);
    std::printf("Mean ln(PPL/PPL_ref): %10.6f +/- %.6f\n", k.ln_ppl_ratio.mean, k.ln_ppl_ratio.stderr_);
    std::printf("Mean    KLD: %10.6f +/- %.6f\n", k.kld.mean, k.kld.stderr_);
    std::printf("Maximum KLD: %10.6f\n", k.kld_max);
    std::printf("99.9%%   KLD: %10.6f\n", k.kld_p999);
    std::printf("99.0%%   KLD: %10.6f\n", k.kld_p99);
    std::printf("90.0%%   KLD: %10.6f\n", k.kld_p90);
    std::printf("Median  KLD: %10.6f\n", k.kld_median);
    std::printf("Same top p: %6.3f +/- %.3f %%\n", 100 * k.same_top.mean, 100 * k.same_top.stderr_);
  }
  if (!f.save.empty()) std::printf("wrote the reference log-probabilities to %s\n", f.save.c_str());
  return 0;
}

}  // namespace phi4mm::cli
