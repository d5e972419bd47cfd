// PCRE2-backed implementation of RegexSplitter (see regex_splitter.h).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "phi4mm/tokenizer/regex_splitter.h"

#include <pcre2.h>

namespace phi4mm {
namespace {

// Unicode White_Space, as the body of a character class.
constexpr const char* kWhiteSpaceSet =
    "\\x{9}-\\x{D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}"
    "\\x{205F}\\x{3000}";

std::string Pcre2Message(int code) {
  PCRE2_UCHAR buf[256];
  const int n = pcre2_get_error_message(code, buf, sizeof(buf));
  if (n < 0) return "PCRE2 error " + std::to_string(code);
  return std::string(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

}  // namespace

struct RegexSplitter::Impl {
  pcre2_code* code = nullptr;
  ~Impl() {
    if (code != nullptr) pcre2_code_free(code);
  }
};

std::string RewriteWhitespaceClasses(const std::string& pattern) {
  std::string out;
  out.reserve(pattern.size() + 64);
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[i + 1];
      if (e == 's') {
        out += in_class ? std::string(kWhiteSpaceSet) : "[" + std::string(kWhiteSpaceSet) + "]";
      } else if (e == 'S' && !in_class) {
        out += "[^" + std::string(kWhiteSpaceSet) + "]";
      } else {
        out += c;
        out += e;
      }
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member of the class.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

Result<std::unique_ptr<RegexSplitter>> RegexSplitter::Create(const std::string& pattern, bool keep_gaps) {
  std::unique_ptr<RegexSplitter> s(new RegexSplitter());
  s->impl_ = std::make_unique<Impl>();
  s->keep_gaps_ = keep_gaps;
  s->compiled_pattern_ = RewriteWhitespaceClasses(pattern);
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  s->impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(s->compiled_pattern_.data()),
                                 s->compiled_pattern_.size(), PCRE2_UTF | PCRE2_UCP, &err, &err_offset,
                                 nullptr);
  if (s->impl_->code == nullptr) {
    return InvalidArgument("pre-tokenizer regex does not compile (" + Pcre2Message(err) + " at offset " +
                           std::to_string(err_offset) + "): " + pattern);
  }
  // JIT is an optimisation: when unavailable, pcre2_match falls back to the interpreter.
  (void)pcre2_jit_compile(s->impl_->code, PCRE2_JIT_COMPLETE);
  return s;
}

RegexSplitter::~RegexSplitter() = default;

Status RegexSplitter::Split(std::string_view text, std::vector<std::string_view>* pieces, size_t max_pieces) const {
  if (text.empty()) return Status::Ok();
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(impl_->code, nullptr);
  if (md == nullptr) return Internal("out of memory creating PCRE2 match data");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  size_t gap_start = 0;
  Status status;
  while (pos < text.size() && pieces->size() < max_pieces) {
    int rc = pcre2_match(impl_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      // The JIT's machine stack is small; the interpreter keeps its backtracking state on the heap.
      rc = pcre2_match(impl_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      status = Internal("pre-tokenizer regex failed at byte " + std::to_string(pos) + ": " + Pcre2Message(rc));
      break;
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t start = ov[0];
    const size_t end = ov[1];
    if (end == start) {
      // An empty match: step over one character so the loop always advances.
      size_t step = 1;
      while (start + step < text.size() && (static_cast<uint8_t>(text[start + step]) & 0xC0) == 0x80) ++step;
      pos = start + step;
      continue;
    }
    if (keep_gaps_ && start > gap_start) pieces->push_back(text.substr(gap_start, start - gap_start));
    pieces->push_back(text.substr(start, end - start));
    pos = end;
    gap_start = end;
  }
  if (status.ok() && keep_gaps_ && gap_start < text.size() && pieces->size() < max_pieces)
    pieces->push_back(text.substr(gap_start));
  pcre2_match_data_free(md);
  return status;
}

}  // namespace phi4mm
