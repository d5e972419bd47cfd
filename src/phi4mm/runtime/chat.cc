// Prompt encoding and Chat turns.
#include "phi4mm/runtime/chat.h"

#include <algorithm>

namespace phi4mm {

namespace {
constexpr int32_t kEndTokenId = 200020;  // <|end|>
}

Result<std::vector<int32_t>> EncodePrompt(const Tokenizer& tok, std::string_view rendered,
                                          std::span<const int32_t> image_token_counts,
                                          std::span<const int32_t> audio_token_counts) {
  MediaPlaceholders ph = RewriteMediaPlaceholders(rendered);
  PHI4MM_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tok.Encode(ph.text));
  return ExpandMediaTokens(ids, image_token_counts, audio_token_counts);
}

Chat::Chat(std::shared_ptr<const Model> model, std::string system_prompt)
    : system_prompt_(std::move(system_prompt)), session_(std::move(model)) {}

void Chat::Reset() {
  session_.Reset();
  turns_ = 0;
}

Result<GenerateResult> Chat::Send(const std::string& user_text, const GenerateOptions& opts,
                                  const StreamCallback& on_text) {
  std::vector<ChatMessage> msgs;
  if (turns_ == 0 && !system_prompt_.empty()) msgs.push_back({"system", system_prompt_, std::nullopt});
  msgs.push_back({"user", user_text, std::nullopt});
  PHI4MM_ASSIGN_OR_RETURN(std::string rendered, RenderChatPrompt(msgs, /*add_generation_prompt=*/true));
  PHI4MM_ASSIGN_OR_RETURN(std::vector<int32_t> ids, EncodePrompt(session_.model().tokenizer(), rendered));
  // Close the previous answer the way the template renders it: "<|assistant|>answer<|end|>".
  const size_t keep = session_.tokens().size();
  if (turns_ > 0) {
    const auto& eos = session_.model().config().generation.eos_token_ids;
    const auto& toks = session_.tokens();
    if (!toks.empty() && std::find(eos.begin(), eos.end(), toks.back()) != eos.end()) session_.Truncate(keep - 1);
    ids.insert(ids.begin(), kEndTokenId);
  }
  auto res = session_.Generate(ids, session_.mode(), opts, on_text);
  if (!res.ok()) {
    session_.Truncate(keep);
    return res.status();
  }
  ++turns_;
  return res;
}

}  // namespace phi4mm
