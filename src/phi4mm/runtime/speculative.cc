// The prompt-lookup proposer and the draft-length tuner (speculative.h).
#include "phi4mm/runtime/speculative.h"

#include <algorithm>
#include <cmath>

namespace phi4mm {

const char* SpeculativeModeName(SpeculativeMode m) { return m == SpeculativeMode::kNgram ? "ngram" : "none"; }

std::optional<SpeculativeMode> ParseSpeculativeMode(std::string_view s) {
  if (s == "none") return SpeculativeMode::kNone;
  if (s == "ngram") return SpeculativeMode::kNgram;
  return std::nullopt;
}

std::vector<int32_t> LookupDraftIn(std::span<const int32_t> source, std::span<const int32_t> tokens, int max_draft,
                                   int min_ngram, int max_ngram) {
  const int64_t L = static_cast<int64_t>(tokens.size()), M = static_cast<int64_t>(source.size());
  const bool self = source.data() == tokens.data() && M == L;
  for (int64_t n = std::min<int64_t>(max_ngram, self ? L - 1 : L); n >= std::max(1, min_ngram); --n) {
    const std::span<const int32_t> tail = tokens.subspan(static_cast<size_t>(L - n));
    // The latest start p whose n ids equal the tail's (before the tail itself when searching the
    // sequence in itself) with something after it.
    for (int64_t p = (self ? L - n : M - n) - 1; p >= 0; --p) {
      if (!std::equal(tail.begin(), tail.end(), source.begin() + p)) continue;
      const int64_t from = p + n, to = std::min(M, from + max_draft);
      if (from >= to) continue;
      return std::vector<int32_t>(source.begin() + from, source.begin() + to);
    }
  }
  return {};
}

std::vector<int32_t> LookupDraft(std::span<const int32_t> tokens, int max_draft, int min_ngram, int max_ngram) {
  return LookupDraftIn(tokens, tokens, max_draft, min_ngram, max_ngram);
}

std::vector<int32_t> Draft(const SpeculativeOptions& o, std::span<const int32_t> tokens, size_t answer_begin,
                           int max_draft) {
  if (max_draft <= 0) return {};
  if (!o.prediction.empty()) {
    const std::span<const int32_t> answer = tokens.subspan(std::min(answer_begin, tokens.size()));
    const std::span<const int32_t> pred(o.prediction);
    std::vector<int32_t> d =
        answer.empty() ? std::vector<int32_t>(pred.begin(), pred.begin() + std::min<int64_t>(max_draft, pred.size()))
                       : LookupDraftIn(pred, answer, max_draft, o.min_ngram, o.max_ngram);
    if (!d.empty()) return d;
  }
  if (o.mode == SpeculativeMode::kNgram) return LookupDraft(tokens, max_draft, o.min_ngram, o.max_ngram);
  return {};
}

void StepCosts::Record(int64_t rows, double seconds) {
  if (rows < 1 || rows > kMaxRows || !(seconds > 0)) return;
  double& mean = mean_[static_cast<size_t>(rows)];
  mean = mean == 0 ? seconds : 0.8 * mean + 0.2 * seconds;
}

DraftTuner::DraftTuner(int max_draft) : max_draft_(std::clamp(max_draft, 0, kMaxDraft)) {}

void DraftTuner::RecordDraft(int drafted, int accepted) {
  if (drafted <= 0) return;
  // `accepted` successes, then one failure unless the whole draft was taken.
  const double trials = accepted + (accepted < drafted ? 1 : 0);
  const double keep = std::pow(0.5, trials / 32.0);
  successes_ = successes_ * keep + accepted;
  trials_ = trials_ * keep + trials;
}

int DraftTuner::DraftLength(int cap, const StepCosts& costs, int64_t base) {
  cap = static_cast<int>(std::min<int64_t>({cap, max_draft_, StepCosts::kMaxRows - base}));
  if (cap <= 0) return 0;
  const double a = acceptance(), t_base = costs.Seconds(base);
  int best_k = 0;
  double best = 1.10;  // what a plain step gives (one token per unit cost), plus the margin
  double expected = 1.0, power = 1.0;
  for (int k = 1; k <= cap; ++k) {
    power *= a;
    expected += power;
    const double tk = costs.Seconds(base + k);
    const double cost = t_base > 0 && tk > 0 ? tk / t_base : 1.0 + 0.1 * k;
    // The step's tokens per unit of time against a step without this draft: base - 1 rows commit
    // one token each, this request's E(k).
    const double gain = (static_cast<double>(base) - 1 + expected) / (static_cast<double>(base) * cost);
    if (gain > best) {
      best = gain;
      best_k = k;
    }
  }
  if (best_k > 0) {
    plain_since_probe_ = 0;
    return best_k;
  }
  if (++plain_since_probe_ >= 16) {
    plain_since_probe_ = 0;
    return std::min(cap, 2);
  }
  return 0;
}

}  // namespace phi4mm
