// The prompt-lookup proposer and the draft-length tuner (speculative.h).
#include "phi4mm/runtime/speculative.h"

#include "phi4mm/tokenizer/chat_format.h"

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

NgramPool::NgramPool(int64_t bytes) : capacity_(bytes > 0 ? static_cast<size_t>(bytes) / sizeof(Slot) : 0) {}

int64_t NgramPool::bytes() const { return static_cast<int64_t>(slots_.size() * sizeof(Slot)); }

uint64_t NgramPool::Key(std::span<const int32_t> gram) {
  // FNV-1a over the ids and their count; 0 marks an empty slot.
  uint64_t h = 1469598103934665603ull ^ gram.size();
  for (int32_t id : gram) {
    for (int b = 0; b < 4; ++b) {
      h ^= (static_cast<uint32_t>(id) >> (8 * b)) & 0xffu;
      h *= 1099511628211ull;
    }
  }
  return h == 0 ? 1 : h;
}

void NgramPool::Add(std::span<const int32_t> tokens) {
  if (capacity_ == 0) return;
  if (slots_.empty()) slots_.resize(capacity_);
  const auto media = [](int32_t id) { return id == kImageTokenId || id == kAudioTokenId; };
  const size_t L = tokens.size();
  size_t clean = 0;  // ids since the last placeholder (or the start)
  for (size_t i = 0; i < L; ++i) {
    clean = media(tokens[i]) ? 0 : clean + 1;
    // The n-grams ending at i, and what follows them up to a placeholder.
    if (i + 1 >= L || media(tokens[i + 1])) continue;
    for (size_t n : {size_t{3}, size_t{2}}) {
      if (clean < n) continue;
      const uint64_t key = Key(tokens.subspan(i + 1 - n, n));
      Slot& s = slots_[key % capacity_];
      s.key = key;
      s.len = 0;
      for (size_t j = i + 1; j < L && s.len < kMaxDraft && !media(tokens[j]); ++j) s.next[s.len++] = tokens[j];
    }
  }
}

std::vector<int32_t> NgramPool::Lookup(std::span<const int32_t> tokens, int max_draft) const {
  if (slots_.empty() || max_draft <= 0) return {};
  for (size_t n : {size_t{3}, size_t{2}}) {
    if (tokens.size() < n) continue;
    const uint64_t key = Key(tokens.subspan(tokens.size() - n));
    const Slot& s = slots_[key % capacity_];
    if (s.key != key || s.len == 0) continue;
    return std::vector<int32_t>(s.next.begin(), s.next.begin() + std::min<int>(s.len, max_draft));
  }
  return {};
}

void StepCosts::Record(int64_t rows, double seconds) {
  if (rows < 1 || rows > kMaxRows || !(seconds > 0)) return;
  Recent& r = recent_[static_cast<size_t>(rows)];
  r.seconds[static_cast<size_t>(r.next)] = seconds;
  r.next = (r.next + 1) % kWindow;
  r.count = std::min(r.count + 1, kWindow);
  // Each measured count's least time over its window and those of the larger counts.
  double least = 0;
  for (size_t n = kMaxRows; n >= 1; --n) {
    for (int i = 0; i < recent_[n].count; ++i) {
      const double t = recent_[n].seconds[static_cast<size_t>(i)];
      least = least == 0 ? t : std::min(least, t);
    }
    least_[n] = recent_[n].count > 0 ? least : 0;
  }
}

DraftTuner::DraftTuner(int max_draft) : max_draft_(std::clamp(max_draft, 0, kMaxDraft)) {}

void DraftTuner::RecordDraft(int drafted, int accepted) {
  if (drafted <= 0) return;
  measured_ = true;
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
  if (!measured_ || ++plain_since_probe_ >= 16) {
    plain_since_probe_ = 0;
    return std::min(cap, 2);
  }
  return 0;
}

}  // namespace phi4mm
