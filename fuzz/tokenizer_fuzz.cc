// libFuzzer target for the tokenizer: loads the fixture tokenizer once, then encodes arbitrary bytes.
// Invalid UTF-8 must give InvalidArgument; valid UTF-8 must round-trip through Decode, and the
// streaming decoder must agree with Decode. Any crash, sanitizer report or abort is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "phi4mm/tokenizer/chat_format.h"
#include "phi4mm/tokenizer/tokenizer.h"
#include "phi4mm/tokenizer/utf8.h"

#ifndef PHI4MM_FIXTURES_DIR
#define PHI4MM_FIXTURES_DIR "tests/fixtures"
#endif

namespace {

const phi4mm::Tokenizer& Tok() {
  static const std::shared_ptr<const phi4mm::Tokenizer> tok = [] {
    const char* dir = std::getenv("PHI4MM_TOKENIZER_DIR");
    auto r = phi4mm::Tokenizer::LoadFromDir(dir != nullptr ? dir : PHI4MM_FIXTURES_DIR "/tokenizer");
    if (!r.ok()) std::abort();  // the fixture must load; set PHI4MM_TOKENIZER_DIR when run elsewhere
    return *r;
  }();
  return *tok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const phi4mm::Tokenizer& tok = Tok();
  auto ids = tok.Encode(text);
  const bool valid = !phi4mm::utf8::FindInvalid(text).has_value();
  if (!valid) {
    if (ids.ok() || ids.status().code() != phi4mm::StatusCode::kInvalidArgument) std::abort();
    // Arbitrary bytes still decode (lossily) without trouble when read as token ids.
    std::vector<int32_t> raw;
    for (size_t i = 0; i + 4 <= size; i += 4) {
      raw.push_back(static_cast<int32_t>(data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) |
                                         (static_cast<uint32_t>(data[i + 3]) << 24)));
    }
    const std::string lossy = tok.Decode(raw, (size & 1) != 0);
    if (phi4mm::utf8::FindInvalid(lossy).has_value()) std::abort();
    return 0;
  }
  if (!ids.ok()) std::abort();
  const std::string decoded = tok.Decode(*ids);
  if (decoded != text) {
    // Only an added token with lstrip/rstrip (which swallows whitespace) may change the text.
    bool strips = false;
    for (const phi4mm::AddedToken& t : tok.added_tokens()) {
      strips |= (t.lstrip || t.rstrip) && text.find(t.content) != std::string_view::npos;
    }
    if (!strips) std::abort();
  }
  phi4mm::TokenStreamDecoder stream(tok, /*skip_special=*/false);
  std::string streamed;
  for (int32_t id : *ids) streamed += stream.Push(id);
  streamed += stream.Flush();
  if (streamed != decoded) std::abort();
  const phi4mm::MediaPlaceholders ph = phi4mm::RewriteMediaPlaceholders(text);
  if (ph.image_numbers.empty() && ph.audio_numbers.empty() && ph.text != text) std::abort();
  return 0;
}
