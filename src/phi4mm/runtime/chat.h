// Turning user text into prompt ids, and multi-turn chat over one Session. A conversation keeps
// its KV cache between turns: each turn renders only its own messages with the chat template
// (which concatenates per-message pieces, so this equals rendering the whole conversation) and
// closes the previous answer with <|end|> as the template would. Turns may carry images and audio;
// the conversation's LoRA mode follows all media so far (any image -> vision, else audio ->
// speech), and when an image first joins a conversation that already has audio, the earlier
// turns are encoded again with the vision-speech projection, as the reference computes the
// conversation as one sequence.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "phi4mm/runtime/media.h"
#include "phi4mm/runtime/session.h"
#include "phi4mm/tokenizer/chat_format.h"

namespace phi4mm {

// Tokenizes an already rendered prompt: `<|image_N|>`/`<|audio_N|>` placeholders are renamed and
// expanded to the given token counts (one count per image/audio, in order); a count mismatch is
// an InvalidArgument naming both numbers. `limits` bound the text's tokens (before expansion).
Result<std::vector<int32_t>> EncodePrompt(const Tokenizer& tok, std::string_view rendered,
                                          std::span<const int32_t> image_token_counts = {},
                                          std::span<const int32_t> audio_token_counts = {},
                                          const EncodeLimits& limits = {});

class Chat {
 public:
  explicit Chat(std::shared_ptr<const Model> model, std::string system_prompt = "");

  // Adds a user turn (with optional images/audio; placeholders are prepended when the text has
  // none) and generates the assistant's answer.
  Result<GenerateResult> Send(const std::string& user_text, const MediaInputs& media, const GenerateOptions& opts,
                              const StreamCallback& on_text = {}, const PromptOptions& prompt_opts = {});
  Result<GenerateResult> Send(const std::string& user_text, const GenerateOptions& opts,
                              const StreamCallback& on_text = {}) {
    return Send(user_text, MediaInputs{}, opts, on_text);
  }
  Session& session() { return session_; }
  int64_t turns() const { return static_cast<int64_t>(turns_.size()); }
  void Reset();

 private:
  struct Turn {
    std::string rendered;         // this turn's rendered messages
    MediaInputs media;            // its images and audio
    int64_t answer_begin = 0;     // the answer's first position in the session
    int64_t answer_end = 0;       // one past its last generated token
  };
  // Encodes every earlier turn again (new projection/mode) into a fresh session.
  Status Rebuild(const PromptOptions& prompt_opts, LoraMode mode);

  std::shared_ptr<const Model> model_;
  std::string system_prompt_;
  Session session_;
  std::vector<Turn> turns_;
  bool has_image_ = false, has_audio_ = false;
};

}  // namespace phi4mm
