// Session: sequence bookkeeping, cache invalidation rules, and the generation loop.
#include "phi4mm/runtime/session.h"

#include <algorithm>
#include <chrono>

namespace phi4mm {

namespace {
double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
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

const char* FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kEos: return "stop";
    case FinishReason::kStopString: return "stop_string";
    case FinishReason::kMaxTokens: return "length";
    case FinishReason::kContextFull: return "context_full";
    case FinishReason::kCancelled: return "cancelled";
  }
  return "?";
}

Status GenerateOptions::Validate() const {
  if (max_new_tokens < 0) return InvalidArgument("max new tokens must be >= 0");
  for (const auto& s : stop_strings)
    if (s.empty()) return InvalidArgument("stop strings must not be empty");
  return sampling.Validate();
}

Session::Session(std::shared_ptr<const Model> model)
    : model_(std::move(model)), cache_(model_->decoder().NewCache()) {}

void Session::Reset() {
  tokens_.clear();
  cache_.Clear();
  logits_.clear();
  mode_ = LoraMode::kNone;
}

void Session::Truncate(size_t n) {
  if (n < tokens_.size()) tokens_.resize(n);
  cache_.Truncate(static_cast<int64_t>(n));
  logits_.clear();
}

Status Session::Sync(LoraMode mode, const std::string& tap_prefix) {
  const Decoder& dec = model_->decoder();
  const int64_t total = static_cast<int64_t>(tokens_.size());
  const bool long_rope = dec.rotary().UseLong(total);
  if (cache_.length() > 0 && (mode != mode_ || long_rope != cache_.long_rope())) cache_.Clear();
  mode_ = mode;
  const int64_t start = cache_.length();
  const int64_t S = total - start;
  if (S <= 0) return Status::Ok();
  const int64_t H = dec.config().hidden_size;
  std::vector<float> embeds(static_cast<size_t>(S * H)), hidden(static_cast<size_t>(H));
  PHI4MM_RETURN_IF_ERROR(model_->embedding().Embed(std::span(tokens_).subspan(start), embeds.data()));
  PHI4MM_RETURN_IF_ERROR(
      dec.Forward(embeds.data(), S, mode, long_rope, &cache_, model_->pool(), tap_, tap_prefix, hidden.data()));
  logits_.resize(static_cast<size_t>(dec.lm_head().rows()));
  dec.Logits(hidden.data(), logits_.data(), model_->pool());
  if (tap_) tap_->Tap(tap_prefix + "logits", logits_.data(), {static_cast<int64_t>(logits_.size())});
  return Status::Ok();
}

Status Session::Append(std::span<const int32_t> ids, LoraMode mode) {
  const int64_t ctx = model_->context_length();
  const int64_t total = static_cast<int64_t>(tokens_.size() + ids.size());
  if (total > ctx)
    return OutOfRange("the prompt needs " + std::to_string(total) + " tokens (" + std::to_string(ids.size()) +
                      " new) but the model's context holds " + std::to_string(ctx) +
                      "; shorten the prompt or start a new conversation");
  const int64_t vocab = model_->embedding().vocab_size();
  for (int32_t id : ids)
    if (id < 0 || id >= vocab)
      return InvalidArgument("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                             std::to_string(vocab) + ")");
  const size_t before = tokens_.size();
  tokens_.insert(tokens_.end(), ids.begin(), ids.end());
  Status st = Sync(mode, "prefill.");
  if (!st.ok()) Truncate(before);
  return st;
}

Result<GenerateResult> Session::Generate(std::span<const int32_t> prompt_ids, LoraMode mode,
                                         const GenerateOptions& opts, const StreamCallback& on_text) {
  PHI4MM_RETURN_IF_ERROR(opts.Validate());
  GenerateResult res;
  const int64_t cached_before = cache_.length();
  auto t0 = std::chrono::steady_clock::now();
  PHI4MM_RETURN_IF_ERROR(Append(prompt_ids, mode));
  auto t1 = std::chrono::steady_clock::now();
  res.prefill_seconds = Seconds(t0, t1);
  res.prompt_tokens = static_cast<int64_t>(tokens_.size()) - std::min<int64_t>(cached_before, tokens_.size());

  const Tokenizer& tok = model_->tokenizer();
  const std::vector<int32_t>& stop_ids =
      opts.stop_ids.empty() ? model_->config().generation.eos_token_ids : opts.stop_ids;
  Sampler sampler(opts.sampling, tok.vocab_size());
  TokenStreamDecoder stream(tok, /*skip_special=*/true);
  std::string text;    // all decoded answer text so far
  size_t emitted = 0;  // bytes of `text` handed to the callback
  auto emit_to = [&](size_t end) -> bool {
    bool keep_going = true;
    if (end > emitted && on_text) keep_going = on_text(std::string_view(text).substr(emitted, end - emitted));
    emitted = std::max(emitted, end);
    return keep_going;
  };

  const int64_t ctx = model_->context_length();
  res.finish = FinishReason::kMaxTokens;
  for (int64_t step = 0; step < opts.max_new_tokens; ++step) {
    if (static_cast<int64_t>(tokens_.size()) >= ctx) {
      res.finish = FinishReason::kContextFull;
      break;
    }
    const int32_t id = sampler.Next(std::span(logits_), tokens_);
    tokens_.push_back(id);
    res.tokens.push_back(id);
    if (std::find(stop_ids.begin(), stop_ids.end(), id) != stop_ids.end()) {
      res.finish = FinishReason::kEos;
      break;
    }
    text += stream.Push(id);
    bool stop_string = false;
    for (const std::string& s : opts.stop_strings) {
      const size_t from = emitted > s.size() ? emitted - s.size() : 0;
      const size_t pos = text.find(s, from);
      if (pos != std::string::npos) {
        text.resize(pos);
        stop_string = true;
      }
    }
    if (stop_string) {
      res.finish = FinishReason::kStopString;
      break;
    }
    if (!emit_to(text.size() - HeldBack(text, opts.stop_strings))) {
      res.finish = FinishReason::kCancelled;
      break;
    }
    if (step + 1 == opts.max_new_tokens) break;
    // Feed the sampled token to get the next logits.
    auto ts = std::chrono::steady_clock::now();
    PHI4MM_RETURN_IF_ERROR(Sync(mode, "step." + std::to_string(step + 1) + "."));
    res.decode_seconds += Seconds(ts, std::chrono::steady_clock::now());
    ++res.decode_steps;
  }
  if (res.finish == FinishReason::kCancelled) {
    res.text = text.substr(0, emitted);
  } else {
    if (res.finish != FinishReason::kStopString) text += stream.Flush();
    emit_to(text.size());
    res.text = text;
  }
  return res;
}

}  // namespace phi4mm
