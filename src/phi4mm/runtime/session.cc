// Session: sequence bookkeeping, cache invalidation rules, and the generation loop.
#include "phi4mm/runtime/session.h"

#include "phi4mm/runtime/sequence.h"

#include <algorithm>
#include <chrono>

namespace phi4mm {

namespace {
double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
}  // namespace

const char* FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kEos: return "stop";
    case FinishReason::kStopString: return "stop_string";
    case FinishReason::kMaxTokens: return "length";
    case FinishReason::kContextFull: return "context_full";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kDeadline: return "deadline";
  }
  return "?";
}

Status GenerateOptions::Validate(int64_t vocab_size) const {
  if (max_new_tokens < 0) return InvalidArgument("max new tokens must be >= 0");
  for (const auto& s : stop_strings)
    if (s.empty()) return InvalidArgument("stop strings must not be empty");
  return sampling.Validate(vocab_size);
}

Session::Session(std::shared_ptr<const Model> model)
    : model_(std::move(model)), cache_(model_->decoder().NewCache()) {}

void Session::Reset() {
  tokens_.clear();
  media_.Clear();
  cache_.Clear();
  logits_.clear();
  mode_ = LoraMode::kNone;
}

void Session::Truncate(size_t n) {
  if (n < tokens_.size()) {
    tokens_.resize(n);
    media_.at.resize(n);
  }
  cache_.Truncate(static_cast<int64_t>(n));
  logits_.clear();
}

Status Session::Run(LoraMode mode, std::span<const int32_t> draft, const std::string& tap_prefix) {
  const Decoder& dec = model_->decoder();
  const int64_t total = static_cast<int64_t>(tokens_.size());
  const bool long_rope = dec.rotary().UseLong(total);
  if (cache_.length() > 0 && (mode != mode_ || long_rope != cache_.long_rope())) cache_.Clear();
  mode_ = mode;
  const int64_t start = cache_.length();
  std::vector<int32_t> ids(tokens_.begin() + start, tokens_.end());
  ids.insert(ids.end(), draft.begin(), draft.end());
  const int64_t S = static_cast<int64_t>(ids.size()), H = dec.config().hidden_size;
  if (S <= 0) return Status::Ok();
  // The prompt goes through the decoder in chunks of at most prefill_chunk_ positions, so the
  // activations stay bounded whatever its length; with a tap (or a draft) it runs whole, so the
  // named tensors (the rows' hidden states) cover every position.
  const int64_t chunk = tap_ != nullptr || !draft.empty() ? S : std::max<int64_t>(1, prefill_chunk_);
  const int64_t rows = draft.empty() ? 1 : S;  // positions whose logits are wanted
  std::vector<float> embeds(static_cast<size_t>(std::min(S, chunk) * H)), hidden(static_cast<size_t>(rows * H));
  std::vector<const float*> overrides;
  for (int64_t c0 = 0; c0 < S; c0 += chunk) {
    const int64_t n = std::min(chunk, S - c0);
    // Placeholder positions of a prompt take their media rows; everything else (including a
    // placeholder id the model itself generated) takes its token embedding, as in the reference.
    media_.Overrides(start + c0, n, H, &overrides);
    PHI4MM_RETURN_IF_ERROR(model_->embedding().EmbedRows(std::span(ids).subspan(c0, n), overrides, embeds.data()));
    SeqChunk ch{embeds.data(), n, &cache_, mode, long_rope, hidden.data()};
    if (!draft.empty()) std::swap(ch.last_hidden, ch.all_hidden);
    PHI4MM_RETURN_IF_ERROR(dec.Step(std::span(&ch, 1), model_->pool(), &scratch_, tap_, tap_prefix));
  }
  logits_.resize(static_cast<size_t>(rows * dec.lm_head().rows()));
  dec.LogitsRows(hidden.data(), rows, logits_.data(), model_->pool());
  if (tap_) tap_->Tap(tap_prefix + "logits", logits_.data(), {static_cast<int64_t>(logits_.size())});
  return Status::Ok();
}

Status Session::Append(std::span<const int32_t> ids, LoraMode mode, const MediaFeatures* media) {
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
  const int64_t H = model_->config().text.hidden_size;
  const auto n_img = static_cast<size_t>(std::count(ids.begin(), ids.end(), kImageTokenId));
  const auto n_aud = static_cast<size_t>(std::count(ids.begin(), ids.end(), kAudioTokenId));
  const size_t have_img = media ? media->image.size() / H : 0, have_aud = media ? media->audio.size() / H : 0;
  if (media && (media->image.size() % H != 0 || media->audio.size() % H != 0))
    return InvalidArgument("media features must have " + std::to_string(H) + " values per row");
  if (n_img != have_img || n_aud != have_aud)
    return InvalidArgument("the prompt has " + std::to_string(n_img) + " image and " + std::to_string(n_aud) +
                           " audio placeholder tokens but features for " + std::to_string(have_img) + " and " +
                           std::to_string(have_aud) + " were given");
  const size_t before = tokens_.size(), images_before = media_.image.size(), audios_before = media_.audio.size();
  media_.at.resize(before);  // the positions Generate added take their token embedding
  tokens_.insert(tokens_.end(), ids.begin(), ids.end());
  // One image item and one audio item hold this append's rows.
  std::vector<MediaRows::Features> images, audios;
  if (n_img > 0) images.push_back(std::make_shared<const std::vector<float>>(media->image));
  if (n_aud > 0) audios.push_back(std::make_shared<const std::vector<float>>(media->audio));
  const int64_t image_rows[1] = {static_cast<int64_t>(n_img)}, audio_rows[1] = {static_cast<int64_t>(n_aud)};
  media_.Append(ids, std::move(images), std::span(image_rows, n_img > 0 ? 1 : 0), std::move(audios),
                std::span(audio_rows, n_aud > 0 ? 1 : 0));
  Status st = Run(mode, {}, "prefill.");
  if (!st.ok()) {
    Truncate(before);
    media_.image.resize(images_before);
    media_.audio.resize(audios_before);
  }
  return st;
}

Result<GenerateResult> Session::Generate(std::span<const int32_t> prompt_ids, LoraMode mode,
                                         const GenerateOptions& opts, const StreamCallback& on_text,
                                         const MediaFeatures* media) {
  PHI4MM_RETURN_IF_ERROR(opts.Validate(model_->embedding().vocab_size()));
  const int64_t cached_before = cache_.length();
  auto t0 = std::chrono::steady_clock::now();
  PHI4MM_RETURN_IF_ERROR(Append(prompt_ids, mode, media));
  Sequence seq(*model_, opts, tokens_.size());
  GenerateResult& res = seq.result();
  res.prefill_seconds = Seconds(t0, std::chrono::steady_clock::now());
  res.prompt_tokens = static_cast<int64_t>(tokens_.size()) - std::min<int64_t>(cached_before, tokens_.size());
  StepCosts costs;  // decoder steps by rows, for the draft tuner
  for (int64_t step = 1;; ++step) {
    const Sequence::Taken t = seq.Take(logits_, &tokens_, [&](const Sequence::Step& st) {
      return !st.stream || st.text.empty() || !on_text || on_text(st.text);
    });
    if (!t.error.ok()) return t.error;
    // The cache holds the rows of a verified draft; keep those the answer took (the last id
    // sampled is not in it yet), also when the answer ends here (a next turn reuses the cache).
    cache_.Truncate(std::min(cache_.length(), static_cast<int64_t>(tokens_.size()) - 1));
    if (t.finish) {
      const std::string_view tail = seq.Finish(*t.finish);
      if (!tail.empty() && on_text) on_text(tail);
      break;
    }
    // Feed the sampled id (and a draft after it: not with a tap, whose names are per position).
    const int64_t room = tap_ == nullptr ? model_->context_length() : 0;
    const std::vector<int32_t>& draft = seq.Propose(tokens_, room, cache_.long_rope(), costs, 1, nullptr);
    auto ts = std::chrono::steady_clock::now();
    PHI4MM_RETURN_IF_ERROR(Run(mode, draft, "step." + std::to_string(step) + "."));
    const double seconds = Seconds(ts, std::chrono::steady_clock::now());
    costs.Record(1 + static_cast<int64_t>(draft.size()), seconds);
    res.decode_seconds += seconds;
    ++res.decode_steps;
  }
  return std::move(res);
}

}  // namespace phi4mm
