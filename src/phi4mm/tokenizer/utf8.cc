// Implementation of the tokenizer's UTF-8 helpers (see utf8.h). The rules are those of the Unicode
// standard, table 3-7 "Well-Formed UTF-8 Byte Sequences".
#include "phi4mm/tokenizer/utf8.h"

namespace phi4mm::utf8 {
namespace {

// For a lead byte: the sequence length (0 = not a valid lead byte) and the allowed range of the
// second byte.
struct Lead {
  int len;
  uint8_t lo;
  uint8_t hi;
};

Lead ClassifyLead(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b >= 0xE1 && b <= 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

// How many bytes starting at s[i] belong to a well-formed prefix (1..4); sets *complete when they
// form a whole character. An invalid lead byte gives 1 with *complete = false.
size_t ScanSequence(std::string_view s, size_t i, bool* complete) {
  const auto b = static_cast<uint8_t>(s[i]);
  const Lead lead = ClassifyLead(b);
  *complete = false;
  if (lead.len == 0) return 1;
  if (lead.len == 1) {
    *complete = true;
    return 1;
  }
  size_t n = 1;
  for (int k = 1; k < lead.len; ++k) {
    if (i + n >= s.size()) return n;
    const auto c = static_cast<uint8_t>(s[i + n]);
    const uint8_t lo = k == 1 ? lead.lo : 0x80;
    const uint8_t hi = k == 1 ? lead.hi : 0xBF;
    if (c < lo || c > hi) return n;
    ++n;
  }
  *complete = true;
  return n;
}

}  // namespace

std::optional<size_t> FindInvalid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    bool complete = false;
    const size_t n = ScanSequence(s, i, &complete);
    if (!complete) return i;
    i += n;
  }
  return std::nullopt;
}

void AppendLossy(std::string_view s, std::string* out) {
  size_t i = 0;
  while (i < s.size()) {
    bool complete = false;
    const size_t n = ScanSequence(s, i, &complete);
    if (complete) {
      out->append(s.substr(i, n));
    } else {
      out->append("\xEF\xBF\xBD");
    }
    i += n;
  }
}

size_t IncompleteTailLength(std::string_view s) {
  const size_t max_back = s.size() < 3 ? s.size() : 3;
  for (size_t back = 1; back <= max_back; ++back) {
    const size_t i = s.size() - back;
    const auto b = static_cast<uint8_t>(s[i]);
    if (b >= 0x80 && b < 0xC0) continue;  // continuation byte: look further back
    bool complete = false;
    const size_t n = ScanSequence(s, i, &complete);
    if (!complete && ClassifyLead(b).len > 1 && n == back) return back;
    return 0;
  }
  return 0;
}

char32_t DecodeAt(std::string_view s, size_t i, size_t* len) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  const int n = b0 < 0x80 ? 1 : b0 < 0xE0 ? 2 : b0 < 0xF0 ? 3 : 4;
  if (i + static_cast<size_t>(n) > s.size()) {
    *len = 1;
    return 0xFFFD;
  }
  char32_t cp = n == 1 ? b0 : n == 2 ? (b0 & 0x1F) : n == 3 ? (b0 & 0x0F) : (b0 & 0x07);
  for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<uint8_t>(s[i + k]) & 0x3F);
  *len = static_cast<size_t>(n);
  return cp;
}

void AppendCodePoint(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool IsWhiteSpace(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

}  // namespace phi4mm::utf8
