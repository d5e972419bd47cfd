// Prompt encoding and Chat turns.
#include "phi4mm/runtime/chat.h"

#include <algorithm>

namespace phi4mm {

namespace {
constexpr int32_t kEndTokenId = 200020;  // <|end|>
}

Result<std::vector<int32_t>> EncodePrompt(const Tokenizer& tok, std::string_view rendered,
                                          std::span<const int32_t> image_token_counts,
                                          std::span<const int32_t> audio_token_counts, const EncodeLimits& limits) {
  MediaPlaceholders ph = RewriteMediaPlaceholders(rendered);
  PHI4MM_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tok.Encode(ph.text, limits));
  return ExpandMediaTokens(ids, image_token_counts, audio_token_counts);
}

Chat::Chat(std::shared_ptr<const Model> model, std::string system_prompt)
    : model_(model), system_prompt_(std::move(system_prompt)), session_(std::move(model)) {}

void Chat::Reset() {
  session_.Reset();
  turns_.clear();
  has_image_ = has_audio_ = false;
}

Status Chat::Rebuild(const PromptOptions& prompt_opts, LoraMode mode) {
  const std::vector<int32_t> old = session_.tokens();
  session_.Reset();
  for (size_t t = 0; t < turns_.size(); ++t) {
    Turn& turn = turns_[t];
    PHI4MM_ASSIGN_OR_RETURN(PreparedPrompt p, PreparePrompt(*model_, turn.rendered, turn.media, prompt_opts));
    if (t > 0) p.ids.insert(p.ids.begin(), kEndTokenId);
    PHI4MM_RETURN_IF_ERROR(session_.Append(p.ids, mode, &p.features));
    const std::span<const int32_t> answer(old.data() + turn.answer_begin, turn.answer_end - turn.answer_begin);
    const int64_t begin = static_cast<int64_t>(session_.tokens().size());
    if (!answer.empty()) PHI4MM_RETURN_IF_ERROR(session_.Append(answer, mode));
    turn.answer_begin = begin;
    turn.answer_end = begin + static_cast<int64_t>(answer.size());
  }
  return Status::Ok();
}

Result<GenerateResult> Chat::Send(const std::string& user_text, const MediaInputs& media, const GenerateOptions& opts,
                                  const StreamCallback& on_text, const PromptOptions& prompt_opts) {
  std::vector<ChatMessage> msgs;
  if (turns_.empty() && !system_prompt_.empty()) msgs.push_back({"system", system_prompt_, std::nullopt});
  msgs.push_back({"user", WithDefaultPlaceholders(user_text, media.images.size(), media.audios.size()), std::nullopt});
  PHI4MM_ASSIGN_OR_RETURN(std::string rendered, RenderChatPrompt(msgs, /*add_generation_prompt=*/true));

  const bool has_image = has_image_ || !media.images.empty();
  const bool has_audio = has_audio_ || !media.audios.empty();
  PromptOptions popts = prompt_opts;
  popts.conversation_has_image = has_image;
  popts.conversation_has_audio = has_audio;
  const LoraMode mode = LoraModeForInputs(has_image, has_audio);
  // Earlier audio was projected without an image: encode the conversation again.
  if (!turns_.empty() && has_image && !has_image_ && has_audio_) PHI4MM_RETURN_IF_ERROR(Rebuild(popts, mode));

  // Close the previous answer the way the template renders it: "<|assistant|>answer<|end|>".
  const size_t keep = session_.tokens().size();
  if (!turns_.empty()) {
    const auto& eos = model_->config().generation.eos_token_ids;
    const auto& toks = session_.tokens();
    if (!toks.empty() && std::find(eos.begin(), eos.end(), toks.back()) != eos.end()) {
      session_.Truncate(keep - 1);
      turns_.back().answer_end = static_cast<int64_t>(keep - 1);
    }
  }
  const int64_t used = static_cast<int64_t>(session_.tokens().size()) + (turns_.empty() ? 0 : 1);
  popts.token_budget = std::max<int64_t>(0, model_->context_length() - used);
  PHI4MM_ASSIGN_OR_RETURN(PreparedPrompt p, PreparePrompt(*model_, rendered, media, popts));
  if (!turns_.empty()) p.ids.insert(p.ids.begin(), kEndTokenId);

  const int64_t answer_begin = static_cast<int64_t>(session_.tokens().size() + p.ids.size());
  auto res = session_.Generate(p.ids, mode, opts, on_text, &p.features);
  if (!res.ok()) {
    session_.Truncate(std::min(keep, session_.tokens().size()));
    return res.status();
  }
  turns_.push_back(Turn{rendered, media, answer_begin, static_cast<int64_t>(session_.tokens().size())});
  has_image_ = has_image;
  has_audio_ = has_audio;
  return res;
}

}  // namespace phi4mm
