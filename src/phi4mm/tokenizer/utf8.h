// UTF-8 helpers for the tokenizer: validation with the offset of the first bad byte, lossy decoding
// that replaces each maximal invalid subpart with U+FFFD (what Python's errors="replace" and Rust's
// from_utf8_lossy do), detection of an incomplete trailing sequence for streaming, and the Unicode
// White_Space test used by added-token lstrip/rstrip.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace phi4mm::utf8 {

// Byte offset of the first byte that does not start or continue a well-formed UTF-8 sequence
// (overlong forms, surrogates and code points above U+10FFFF are ill-formed), or nullopt.
std::optional<size_t> FindInvalid(std::string_view s);

// Appends `s` to `out`, replacing every maximal ill-formed subpart with U+FFFD.
void AppendLossy(std::string_view s, std::string* out);

// Length of the trailing bytes of `s` that are a proper prefix of a well-formed sequence (0..3):
// those bytes may still become a character when more bytes arrive.
size_t IncompleteTailLength(std::string_view s);

// Decodes the code point starting at s[i] of well-formed UTF-8 and its length in bytes.
char32_t DecodeAt(std::string_view s, size_t i, size_t* len);

// Appends the UTF-8 encoding of `cp` (which must be a scalar value).
void AppendCodePoint(char32_t cp, std::string* out);

// Unicode White_Space (what Rust's char::is_whitespace tests).
bool IsWhiteSpace(char32_t cp);

}  // namespace phi4mm::utf8
