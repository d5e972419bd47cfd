// The Phi-4-mm chat prompt format and multimodal placeholder handling. RenderChatPrompt reproduces the
// chat_template of the original tokenizer_config.json (`<|role|>content<|end|>` per message, then
// `<|assistant|>` or the EOS string). RewriteMediaPlaceholders and ExpandMediaTokens do what
// Microsoft's processor does with `<|image_N|>` / `<|audio_N|>`: rename them to the placeholder tokens
// 200010 / 200011 before tokenizing, then repeat each placeholder id once per embedding row.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "phi4mm/base/status.h"

namespace phi4mm {

inline constexpr int32_t kImageTokenId = 200010;  // <|endoftext10|>
inline constexpr int32_t kAudioTokenId = 200011;  // <|endoftext11|>
inline constexpr std::string_view kImageTokenText = "<|endoftext10|>";
inline constexpr std::string_view kAudioTokenText = "<|endoftext11|>";

struct ChatMessage {
  std::string role;     // "system", "user", "assistant" or "tool"
  std::string content;
  // Tool definitions (JSON text) of a system message; rendered as <|tool|>...<|/tool|>.
  std::optional<std::string> tools;
};

// Renders messages exactly as the original chat template does. Unknown roles give InvalidArgument.
Result<std::string> RenderChatPrompt(std::span<const ChatMessage> messages, bool add_generation_prompt);

// The prompt with placeholders renamed, and the N of each placeholder in order of appearance.
struct MediaPlaceholders {
  std::string text;
  std::vector<int64_t> image_numbers;
  std::vector<int64_t> audio_numbers;
};

// Rewrites every `<|image_N|>` to `<|endoftext10|>` and every `<|audio_N|>` to `<|endoftext11|>` (N is
// one or more ASCII digits). Text without them is returned unchanged.
MediaPlaceholders RewriteMediaPlaceholders(std::string_view prompt);

// Replaces the k-th kImageTokenId in `ids` by image_token_counts[k] copies and the k-th kAudioTokenId by
// audio_token_counts[k] copies. InvalidArgument when the number of placeholders differs from the number
// of counts, or a count is negative.
Result<std::vector<int32_t>> ExpandMediaTokens(std::span<const int32_t> ids,
                                               std::span<const int32_t> image_token_counts,
                                               std::span<const int32_t> audio_token_counts);

}  // namespace phi4mm
