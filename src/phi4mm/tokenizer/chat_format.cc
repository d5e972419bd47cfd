// Implementation of the chat prompt rendering and media placeholder handling (see chat_format.h).
#include "phi4mm/tokenizer/chat_format.h"

#include <limits>

namespace phi4mm {
namespace {

bool KnownRole(const std::string& role) {
  return role == "system" || role == "user" || role == "assistant" || role == "tool";
}

// Matches `<|kind_N|>` at text[i]; on success sets *n and *len.
bool MatchPlaceholder(std::string_view text, size_t i, std::string_view kind, int64_t* n, size_t* len) {
  const std::string_view rest = text.substr(i);
  if (rest.size() < 2 + kind.size() + 1 || rest.substr(0, 2) != "<|" || rest.substr(2, kind.size()) != kind ||
      rest[2 + kind.size()] != '_') {
    return false;
  }
  size_t j = 3 + kind.size();
  const size_t digits_start = j;
  int64_t value = 0;
  while (j < rest.size() && rest[j] >= '0' && rest[j] <= '9') {
    const int d = rest[j] - '0';
    value = value > (std::numeric_limits<int64_t>::max() - d) / 10 ? std::numeric_limits<int64_t>::max()
                                                                    : value * 10 + d;
    ++j;
  }
  if (j == digits_start || rest.substr(j, 2) != "|>") return false;
  *n = value;
  *len = j + 2;
  return true;
}

std::string Plural(size_t n, const char* word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

}  // namespace

Result<std::string> RenderChatPrompt(std::span<const ChatMessage> messages, bool add_generation_prompt) {
  std::string out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (!KnownRole(m.role)) {
      return InvalidArgument("chat message " + std::to_string(i) + " has role \"" + m.role +
                             "\"; use system, user, assistant or tool");
    }
    out += "<|" + m.role + "|>" + m.content;
    if (m.role == "system" && m.tools.has_value()) out += "<|tool|>" + *m.tools + "<|/tool|>";
    out += "<|end|>";
  }
  out += add_generation_prompt ? "<|assistant|>" : "<|endoftext|>";
  return out;
}

MediaPlaceholders RewriteMediaPlaceholders(std::string_view prompt) {
  MediaPlaceholders r;
  r.text.reserve(prompt.size());
  size_t i = 0;
  while (i < prompt.size()) {
    int64_t n = 0;
    size_t len = 0;
    if (prompt[i] == '<' && MatchPlaceholder(prompt, i, "image", &n, &len)) {
      r.text += kImageTokenText;
      r.image_numbers.push_back(n);
      i += len;
    } else if (prompt[i] == '<' && MatchPlaceholder(prompt, i, "audio", &n, &len)) {
      r.text += kAudioTokenText;
      r.audio_numbers.push_back(n);
      i += len;
    } else {
      r.text += prompt[i++];
    }
  }
  return r;
}

Result<std::vector<int32_t>> ExpandMediaTokens(std::span<const int32_t> ids,
                                               std::span<const int32_t> image_token_counts,
                                               std::span<const int32_t> audio_token_counts) {
  size_t images = 0;
  size_t audios = 0;
  for (int32_t id : ids) {
    images += id == kImageTokenId;
    audios += id == kAudioTokenId;
  }
  if (images != image_token_counts.size()) {
    return InvalidArgument("prompt has " + Plural(images, "<|image_N|> placeholder") + " but " +
                           Plural(image_token_counts.size(), "image") +
                           (image_token_counts.size() == 1 ? " was" : " were") +
                           " given; put one <|image_N|> in the prompt per image");
  }
  if (audios != audio_token_counts.size()) {
    return InvalidArgument("prompt has " + Plural(audios, "<|audio_N|> placeholder") + " but " +
                           Plural(audio_token_counts.size(), "audio") +
                           (audio_token_counts.size() == 1 ? " was" : " were") +
                           " given; put one <|audio_N|> in the prompt per audio");
  }
  size_t total = ids.size();
  for (int32_t c : image_token_counts) {
    if (c < 0) return InvalidArgument("negative image token count " + std::to_string(c));
    total += static_cast<size_t>(c);
  }
  for (int32_t c : audio_token_counts) {
    if (c < 0) return InvalidArgument("negative audio token count " + std::to_string(c));
    total += static_cast<size_t>(c);
  }
  std::vector<int32_t> out;
  out.reserve(total);
  size_t next_image = 0;
  size_t next_audio = 0;
  for (int32_t id : ids) {
    if (id == kImageTokenId) {
      out.insert(out.end(), static_cast<size_t>(image_token_counts[next_image++]), id);
    } else if (id == kAudioTokenId) {
      out.insert(out.end(), static_cast<size_t>(audio_token_counts[next_audio++]), id);
    } else {
      out.push_back(id);
    }
  }
  return out;
}

}  // namespace phi4mm
