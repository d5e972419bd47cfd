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

std::vector<int32_t> LookupDraft(std::span<const int32_t> tokens, int max_draft, int min_ngram, int max_ngram) {
  const int64_t L = static_cast<int64_t>(tokens.size());
  for (int64_t n = std::min<int64_t>(max_ngram, L - 1); n >= std::max(1, min_ngram); --n) {
    const std::span<const int32_t> tail = tokens.subspan(static_cast<size_t>(L - n));
    // The latest earlier start p < L - n whose n ids equal the tail's.
    for (int64_t p = L - n - 1; p >= 0; --p) {
      if (!std::equal(tail.begin(), tail.end(), tokens.begin() + p)) continue;
      const int64_t from = p + n, to = std::min(L, from + max_draft);
      return std::vector<int32_t>(tokens.begin() + from, tokens.begin() + to);
    }
  }
  return {};
}

DraftTuner::DraftTuner(int max_draft) : max_draft_(std::clamp(max_draft, 0, kMaxDraft)) {}

void DraftTuner::RecordStep(int rows, double seconds) {
  if (rows < 1 || rows > kMaxDraft + 1 || !(seconds > 0)) return;
  double& mean = step_seconds_[static_cast<size_t>(rows)];
  mean = mean == 0 ? seconds : 0.8 * mean + 0.2 * seconds;
}

void DraftTuner::RecordDraft(int drafted, int accepted) {
  if (drafted <= 0) return;
  // `accepted` successes, then one failure unless the whole draft was taken.
  const double trials = accepted + (accepted < drafted ? 1 : 0);
  const double keep = std::pow(0.5, trials / 32.0);
  successes_ = successes_ * keep + accepted;
  trials_ = trials_ * keep + trials;
}

int DraftTuner::DraftLength(int cap) {
  cap = std::min(cap, max_draft_);
  if (cap <= 0) return 0;
  const double a = acceptance(), t1 = step_seconds_[1];
  int best_k = 0;
  double best = 1.05;  // what a plain step gives (one token per unit cost), plus the margin
  double expected = 1.0, power = 1.0;
  for (int k = 1; k <= cap; ++k) {
    power *= a;
    expected += power;
    const double tn = step_seconds_[static_cast<size_t>(k + 1)];
    const double cost = t1 > 0 && tn > 0 ? tn / t1 : 1.0;
    if (expected / cost > best) {
      best = expected / cost;
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
