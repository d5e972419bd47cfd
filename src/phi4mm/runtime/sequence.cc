// Sequence: the token loop's one body (see sequence.h).
#include "phi4mm/runtime/sequence.h"

#include <algorithm>
#include <chrono>

namespace phi4mm {

namespace {
const std::vector<int32_t>& StopIds(const Model& m, const GenerateOptions& o) {
  return o.stop_ids.empty() ? m.config().generation.eos_token_ids : o.stop_ids;
}

// Length of the longest suffix of `text` that is a proper prefix of some stop string: text that
// must be held back because a stop string may be completing.
size_t HeldBack(const std::string& text, const std::vector<std::string>& stops) {
  size_t hold = 0;
  for (const std::string& s : stops)
    for (size_t k = std::min(text.size(), s.size() - 1); k > hold; --k)
      if (text.compare(text.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
  return hold;
}
}  // namespace

Sequence::Sequence(const Model& model, const GenerateOptions& opts, size_t prompt_length)
    : rotary_(model.decoder().rotary()),
      max_new_tokens_(opts.max_new_tokens),
      context_(model.context_length()),
      vocab_(model.decoder().lm_head().rows()),
      answer_begin_(prompt_length),
      stop_ids_(StopIds(model, opts)),
      sampler_(opts.sampling, model.tokenizer().vocab_size()),
      decoder_(model.tokenizer(), /*skip_special=*/true),
      stop_strings_(opts.stop_strings),
      constraint_(opts.constraint, stop_ids_),
      constrained_(opts.constraint.active()),
      speculative_(opts.speculative),
      tuner_(opts.speculative.max_draft) {
  sampler_.SetPromptLength(prompt_length);
  result_.finish = FinishReason::kMaxTokens;
}

Sequence::Step Sequence::Next(std::span<float> logits, std::vector<int32_t>* tokens,
                              const std::function<void(std::span<const float>)>& observe) {
  Step step;
  const int64_t made = static_cast<int64_t>(result_.tokens.size());
  if (made >= max_new_tokens_) {
    step.finish = FinishReason::kMaxTokens;
    return step;
  }
  if (static_cast<int64_t>(tokens->size()) >= context_) {
    step.finish = FinishReason::kContextFull;
    return step;
  }
  if (constraint_.finished()) {
    step.finish = FinishReason::kEos;
    return step;
  }
  if (observe) observe(logits);
  const bool timed = constrained_;
  const auto t0 = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  constraint_.Mask(logits);
  if (timed) result_.constraint_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int32_t id = sampler_.Next(logits, *tokens);
  step.token = id;
  if (sampler_.records_logprobs()) {
    result_.logprobs.push_back(sampler_.last_logprobs());
    step.logprobs = &result_.logprobs.back();
  }
  tokens->push_back(id);
  result_.tokens.push_back(id);
  const auto t1 = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  Status accepted = constraint_.Accept(id);
  if (timed) result_.constraint_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  if (Status e = accepted; !e.ok()) {
    step.error = e;
    step.finish = FinishReason::kCancelled;
    return step;
  }
  if (std::find(stop_ids_.begin(), stop_ids_.end(), id) != stop_ids_.end()) {
    step.finish = FinishReason::kEos;
    return step;
  }
  text_ += decoder_.Push(id);
  for (const std::string& s : stop_strings_) {
    const size_t pos = text_.find(s, taken_ > s.size() ? taken_ - s.size() : 0);
    if (pos != std::string::npos) {
      text_.resize(pos);
      step.finish = FinishReason::kStopString;
    }
  }
  if (step.finish) return step;
  const size_t ready = text_.size() - HeldBack(text_, stop_strings_);
  if (ready > taken_) {
    step.text = std::string_view(text_).substr(taken_, ready - taken_);
    taken_ = ready;
  }
  step.stream = true;
  if (made + 1 >= max_new_tokens_) step.finish = FinishReason::kMaxTokens;
  return step;
}

const std::vector<int32_t>& Sequence::Propose(std::span<const int32_t> tokens, int64_t room, bool long_rope,
                                              const StepCosts& costs, int64_t base_rows, const NgramPool* pool) {
  draft_.clear();
  pool_draft_ = false;
  const int64_t len = static_cast<int64_t>(tokens.size());
  if (!speculative_.on() || room <= 0 || rotary_.UseLong(len) != long_rope) return draft_;
  const int64_t made = static_cast<int64_t>(result_.tokens.size());
  const int64_t cap = rotary_.RowsOnSameTable(len, std::min({room, context_ - len, max_new_tokens_ - made - 1}));
  const int k = tuner_.DraftLength(static_cast<int>(std::clamp<int64_t>(cap, 0, kMaxDraft)), costs, base_rows);
  draft_ = Draft(speculative_, tokens, answer_begin_, k);
  pool_draft_ = draft_.empty() && pool != nullptr && speculative_.mode == SpeculativeMode::kNgram;
  if (pool_draft_) draft_ = pool->Lookup(tokens, k);
  if (constrained_) draft_.resize(constraint_.AllowedPrefix(draft_));
  return draft_;
}

Sequence::Taken Sequence::Take(std::span<float> rows, std::vector<int32_t>* tokens,
                               const std::function<bool(const Step&)>& emit,
                               const std::function<void(std::span<const float>)>& observe) {
  Taken t;
  t.drafted = static_cast<int>(draft_.size());
  t.from_pool = pool_draft_;
  for (size_t i = 0; (i + 1) * vocab_ <= rows.size(); ++i) {
    Step st = Next(rows.subspan(i * vocab_, vocab_), tokens, observe);
    if (st.error.ok() && st.token >= 0 && !emit(st)) st.finish = FinishReason::kCancelled;
    t.finish = st.finish;
    t.error = st.error;
    if (st.finish || i >= draft_.size() || st.token != draft_[i]) break;
    ++t.taken;
  }
  if (t.drafted > 0) {
    tuner_.RecordDraft(t.drafted, t.taken);
    result_.draft_tokens += t.drafted;
    result_.accepted_draft_tokens += t.taken;
  }
  draft_.clear();
  pool_draft_ = false;
  return t;
}

std::string_view Sequence::Finish(FinishReason reason) {
  result_.finish = reason;
  if (reason == FinishReason::kCancelled || reason == FinishReason::kDeadline) {
    result_.text = text_.substr(0, taken_);
    return {};
  }
  if (reason != FinishReason::kStopString) text_ += decoder_.Flush();
  result_.text = text_;
  const std::string_view tail = std::string_view(text_).substr(std::min(taken_, text_.size()));
  taken_ = text_.size();
  return tail;
}

}  // namespace phi4mm
