// Perplexity and KL divergence of the decoder over a token stream, scored as llama.cpp's
// `llama-perplexity` scores them, so the two tools' numbers sit side by side (docs/quant-quality.md).
// The tokens are cut into windows of `context` positions, each run from an empty KV cache; only the
// second half of each window is scored (position i >= context/2 predicts token i+1), so every
// scored token has at least context/2 tokens of history. Against a reference written by a previous
// run (the `--kl-divergence-base` file format of llama-perplexity, which either tool can read:
// "_logits_", n_ctx, n_vocab, n_chunk, the tokens, then per scored position a 16-bit code of every
// log-probability within 16 nats of the top one), it gives the mean and percentiles of
// KL(reference || model) per scored token, and how often both put the same token first.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "phi4mm/base/status.h"
#include "phi4mm/models/lora_mode.h"

namespace phi4mm {

class Model;

// uint16 values per scored position in a log-probability file: a (scale, min_log_prob) float pair
// in the first 4, then one per vocabulary id (padded to an even count), as llama.cpp lays them out.
inline int64_t LogProbRowWidth(int64_t n_vocab) { return 2 * ((n_vocab + 1) / 2) + 4; }

// Writes the 16-bit code of log_softmax(logits) into `row` (LogProbRowWidth(n) values): codes are
// linear in the logit between max-16 and max; anything below max-16 codes to 0. Returns the
// negative log-likelihood of `target`.
double EncodeLogProbs(const float* logits, int64_t n_vocab, int32_t target, uint16_t* row);

// Running sums over scored positions (plain perplexity, and KL against a reference when present).
struct ScoreSums {
  int64_t count = 0;
  double sum_nll = 0, sum_nll2 = 0;
  double sum_nll_base = 0, sum_nll_base2 = 0, sum_nll_nll_base = 0;
  double sum_kld = 0, sum_kld2 = 0;
  int64_t same_top = 0;
  std::vector<float> kld;  // per scored position, when a reference is used
  void AddNll(double nll);
  // Adds one position scored against a reference row: NLL of `target` under `logits`, KL(ref ||
  // logits) over the ids whose reference log-probability is above -16, and whether the argmaxes
  // agree. Returns the KL value.
  double AddWithReference(const float* logits, int64_t n_vocab, int32_t target, const uint16_t* ref_row);
};

struct MeanError {
  double mean = 0, stderr_ = 0;
};
// The mean of `count` values given their sum and sum of squares, with the standard error of the
// mean (0 below 11 values), as llama-perplexity reports it.
MeanError MeanAndError(double sum, double sum2, int64_t count);
// Linear interpolation between the sorted values around fraction*(n-1), as llama-perplexity does.
double Percentile(std::vector<float> values, double fraction);

struct PerplexityOptions {
  int64_t context = 512;        // window length in positions (>= 4, even)
  int64_t max_chunks = 0;       // 0 = every whole window of the tokens
  LoraMode mode = LoraMode::kNone;
  std::string save_path;        // write a reference (log-probability) file here
  std::string reference_path;   // score against this reference file
  // Called after every window with (windows done, windows in all); may be empty.
  std::function<void(int64_t, int64_t)> progress;
};

struct KlSummary {
  double ppl_base = 0;
  MeanError ln_ppl_ratio;  // mean of (NLL - NLL_ref)
  MeanError kld;
  double kld_median = 0, kld_p90 = 0, kld_p99 = 0, kld_p999 = 0, kld_max = 0;
  MeanError same_top;      // fraction of positions whose argmax equals the reference's
};

struct PerplexityResult {
  int64_t context = 0, chunks = 0, scored = 0;  // scored = chunks * (context - 1 - context/2)
  MeanError nll;
  double ppl = 0, ppl_error = 0;                 // exp(mean NLL) and its first-order error
  std::optional<KlSummary> kl;
};

// Scores `tokens` (or, with a reference, the reference file's tokens, which `tokens` must equal
// when non-empty: a mismatch is an error naming the first different position).
Result<PerplexityResult> EvaluatePerplexity(const Model& model, std::span<const int32_t> tokens,
                                            const PerplexityOptions& opts);

// The header of a reference file: its context, vocabulary size, windows and tokens.
struct LogProbFileHeader {
  int64_t context = 0, n_vocab = 0, chunks = 0;
  std::vector<int32_t> tokens;  // context * chunks
};
Result<LogProbFileHeader> ReadLogProbHeader(std::FILE* f, const std::string& path);

}  // namespace phi4mm
