// The pre-tokenizer's regex split (HF `Split` with a `Regex` pattern), run with PCRE2 in UTF and
// Unicode-property mode, JIT-compiled where the library supports it. `\s`/`\S` are rewritten to the
// Unicode White_Space set so that they mean what they mean in the Rust/Python regex engines that the
// pattern was written for (PCRE2's `\s` also matches U+180E).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "phi4mm/base/status.h"

namespace phi4mm {

class RegexSplitter {
 public:
  // `keep_gaps`: text between matches becomes pieces too (behavior Isolated, invert false); when
  // false only the matches are kept (behavior Removed, invert true).
  static Result<std::unique_ptr<RegexSplitter>> Create(const std::string& pattern, bool keep_gaps);
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  // Appends the pieces of `text` (valid UTF-8) to `pieces`, in order; stops once `pieces` holds
  // `max_pieces`. Thread-safe.
  Status Split(std::string_view text, std::vector<std::string_view>* pieces,
               size_t max_pieces = static_cast<size_t>(-1)) const;

  // The pattern after the `\s` rewrite (for tests and diagnostics).
  const std::string& compiled_pattern() const { return compiled_pattern_; }

 private:
  RegexSplitter() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  bool keep_gaps_ = true;
  std::string compiled_pattern_;
};

// Rewrites `\s` and `\S` outside character classes and `\s` inside them to explicit White_Space sets.
std::string RewriteWhitespaceClasses(const std::string& pattern);

}  // namespace phi4mm
