// Turning user text into prompt ids, and multi-turn chat over one Session. A conversation keeps
// its KV cache between turns: each turn renders only its own messages with the chat template
// (which concatenates per-message pieces, so this equals rendering the whole conversation) and
// closes the previous answer with <|end|> as the template would.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "phi4mm/runtime/session.h"
#include "phi4mm/tokenizer/chat_format.h"

namespace phi4mm {

// Tokenizes an already rendered prompt: `<|image_N|>`/`<|audio_N|>` placeholders are renamed and
// expanded to the given token counts (one count per image/audio, in order); a count mismatch is
// an InvalidArgument naming both numbers.
Result<std::vector<int32_t>> EncodePrompt(const Tokenizer& tok, std::string_view rendered,
                                          std::span<const int32_t> image_token_counts = {},
                                          std::span<const int32_t> audio_token_counts = {});

class Chat {
 public:
  explicit Chat(std::shared_ptr<const Model> model, std::string system_prompt = "");

  // Adds a user turn and generates the assistant's answer.
  Result<GenerateResult> Send(const std::string& user_text, const GenerateOptions& opts,
                              const StreamCallback& on_text = {});
  Session& session() { return session_; }
  int64_t turns() const { return turns_; }
  void Reset();

 private:
  std::string system_prompt_;
  Session session_;
  int64_t turns_ = 0;
};

}  // namespace phi4mm
