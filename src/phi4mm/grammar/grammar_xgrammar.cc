// The grammar layer on XGrammar's C++ core: the vocabulary as XGrammar's TokenizerInfo (raw token
// bytes; special ids as empty strings, which XGrammar never allows inside a grammar), compiled
// grammars cached by digest in a bounded LRU, the matcher's bitmask applied to a logits row, and
// XGrammar's log hooks (it is built with XGRAMMAR_LOG_CUSTOMIZE): a warning while compiling means
// part of the schema would be ignored, so it refuses the schema; nothing is printed.
#include <xgrammar/xgrammar.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>

#include "phi4mm/base/sha256.h"
#include "phi4mm/grammar/grammar.h"
#include "phi4mm/grammar/schema_support.h"

namespace xgrammar {
// Declared by XGrammar's internal support/logging.h when XGRAMMAR_LOG_CUSTOMIZE is set.
[[noreturn]] void LogFatalImpl(const std::string& file, int lineno, const std::string& message);
void LogMessageImpl(const std::string& file, int lineno, int level, const std::string& message);
}  // namespace xgrammar

namespace {
// Warnings XGrammar logs on this thread while a compile is collecting them (else dropped).
thread_local std::vector<std::string>* t_warnings = nullptr;
constexpr int kLogLevelWarning = 2;  // XGRAMMAR_LOG_LEVEL_WARNING
}  // namespace

[[noreturn]] void xgrammar::LogFatalImpl(const std::string& file, int lineno, const std::string& message) {
  (void)file;
  (void)lineno;
  throw std::runtime_error(message);
}

void xgrammar::LogMessageImpl(const std::string& file, int lineno, int level, const std::string& message) {
  (void)file;
  (void)lineno;
  if (level >= kLogLevelWarning && t_warnings != nullptr) t_warnings->push_back(message);
}

namespace phi4mm::grammar {

struct CompiledGrammar::Impl {
  xgrammar::CompiledGrammar compiled;
  int64_t rows = 0;
};

size_t CompiledGrammar::memory_bytes() const { return impl_->compiled.MemorySizeBytes(); }

struct Compiler::Impl {
  Impl(xgrammar::TokenizerInfo info, int64_t rows, size_t cap)
      : compiler(info, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())), /*cache_enabled=*/false),
        rows(rows),
        capacity(std::max<size_t>(1, cap)) {}
  xgrammar::GrammarCompiler compiler;
  int64_t rows;
  size_t capacity;
  mutable std::mutex mu;
  std::list<Digest> lru;  // most recent first
  std::map<Digest, std::pair<std::shared_ptr<const CompiledGrammar>, std::list<Digest>::iterator>> cache;
  CompilerStats stats;

  // The grammar cached under `key` (counted as a hit), or null.
  std::shared_ptr<const CompiledGrammar> Find(const Digest& key) {
    std::lock_guard<std::mutex> l(mu);
    auto it = cache.find(key);
    if (it == cache.end()) return nullptr;
    lru.splice(lru.begin(), lru, it->second.second);
    ++stats.cache_hits;
    return it->second.first;
  }

  // Compiles what Find did not have, and caches it under `key`.
  template <class Fn>
  Result<std::shared_ptr<const CompiledGrammar>> Compile(const Digest& key, Fn compile) {
    std::vector<std::string> warnings;
    t_warnings = &warnings;
    const auto t0 = std::chrono::steady_clock::now();
    std::shared_ptr<const CompiledGrammar> g;
    std::string error;
    try {
      g = std::make_shared<const CompiledGrammar>(
          std::make_shared<const CompiledGrammar::Impl>(CompiledGrammar::Impl{compile(), rows}));
    } catch (const std::exception& e) {
      error = e.what();
    }
    t_warnings = nullptr;
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!error.empty()) return InvalidArgument("the grammar engine cannot compile it: " + error);
    if (!warnings.empty())
      return InvalidArgument("the grammar engine would not enforce all of it: " + warnings.front());
    std::lock_guard<std::mutex> l(mu);
    ++stats.compiled;
    stats.compile_seconds += secs;
    if (cache.count(key) == 0) {
      lru.push_front(key);
      cache.emplace(key, std::make_pair(g, lru.begin()));
      while (cache.size() > capacity) {
        cache.erase(lru.back());
        lru.pop_back();
      }
    }
    stats.cached = static_cast<int64_t>(cache.size());
    return g;
  }
};

Result<std::shared_ptr<Compiler>> Compiler::Create(const Vocabulary& vocab, size_t cache_entries) {
  if (vocab.rows < static_cast<int64_t>(vocab.token_bytes.size()) || vocab.rows <= 0)
    return InvalidArgument("the logits rows (" + std::to_string(vocab.rows) + ") must hold every token id (" +
                           std::to_string(vocab.token_bytes.size()) + ")");
  try {
    xgrammar::TokenizerInfo info(vocab.token_bytes, xgrammar::VocabType::RAW, static_cast<int>(vocab.rows),
                                 std::vector<int32_t>{});
    return std::shared_ptr<Compiler>(new Compiler(std::make_unique<Impl>(std::move(info), vocab.rows, cache_entries)));
  } catch (const std::exception& e) {
    return Internal(std::string("the grammar engine could not take the vocabulary: ") + e.what());
  }
}

Compiler::Compiler(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Compiler::~Compiler() = default;
int64_t Compiler::rows() const { return impl_->rows; }

CompilerStats Compiler::stats() const {
  std::lock_guard<std::mutex> l(impl_->mu);
  return impl_->stats;
}

Result<std::shared_ptr<const CompiledGrammar>> Compiler::JsonSchema(std::string_view schema_json, bool strict) {
  Sha256 h;
  h.Update("json_schema", 11);
  h.UpdateValue(strict);
  h.Update(schema_json.data(), schema_json.size());
  const Digest key = h.Finish();
  // A cached schema passed the check and was rewritten before: a hit does neither again.
  if (auto hit = impl_->Find(key)) return hit;
  PHI4MM_RETURN_IF_ERROR(CheckSchemaSupported(schema_json));
  const std::string schema = SchemaForEngine(schema_json);
  return impl_->Compile(key, [&] {
    // Compact JSON (", " and ": " separators, no free whitespace): a sampled answer cannot wander
    // off into whitespace, and its text is the same whichever whitespace the model prefers.
    return impl_->compiler.CompileJSONSchema(schema, /*any_whitespace=*/false, std::nullopt,
                                             std::make_pair(std::string(", "), std::string(": ")), strict);
  });
}

Result<std::shared_ptr<const CompiledGrammar>> Compiler::JsonObject() {
  Sha256 h;
  h.Update("json_object", 11);
  const Digest key = h.Finish();
  if (auto hit = impl_->Find(key)) return hit;
  return impl_->Compile(key, [&] {
    return impl_->compiler.CompileJSONSchema(R"({"type": "object"})", /*any_whitespace=*/false, std::nullopt,
                                             std::make_pair(std::string(", "), std::string(": ")), /*strict_mode=*/false);
  });
}

// XGrammar reports failures by throwing; a matcher that threw is failed: it allows nothing more
// (Accept returns false, so the request ends with an error instead of the engine thread dying).
struct Matcher::Impl {
  Impl(std::shared_ptr<const CompiledGrammar> g, std::span<const int32_t> stop)
      : grammar(std::move(g)),
        bits(static_cast<size_t>(xgrammar::GetBitmaskSize(static_cast<int>(grammar->impl().rows)))) {
    std::vector<int> ids;
    for (int32_t id : stop)
      if (id >= 0 && id < grammar->impl().rows) ids.push_back(id);
    try {
      // Without stop ids the grammar's text ends where the grammar does.
      matcher.emplace(grammar->impl().compiled, ids.empty() ? std::nullopt : std::optional<std::vector<int>>(ids),
                      /*terminate_without_stop_token=*/ids.empty());
    } catch (const std::exception& e) {
      Fail(e);
    }
  }
  // A deep copy (XGrammar's Fork): the parser state is not shared.
  Impl(const Impl& o) : grammar(o.grammar), error(o.error), bits(o.bits.size()) {
    if (!o.matcher) return;
    try {
      matcher.emplace(o.matcher->Fork());
    } catch (const std::exception& e) {
      Fail(e);
    }
  }
  void Fail(const std::exception& e) {
    matcher.reset();
    error = e.what();
  }
  std::shared_ptr<const CompiledGrammar> grammar;
  std::optional<xgrammar::GrammarMatcher> matcher;  // empty: failed
  std::string error;
  std::vector<int32_t> bits;
};

Matcher::Matcher(std::shared_ptr<const CompiledGrammar> grammar, std::span<const int32_t> stop_ids)
    : impl_(std::make_unique<Impl>(std::move(grammar), stop_ids)) {}
Matcher::Matcher(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Matcher::~Matcher() = default;
Matcher::Matcher(Matcher&&) noexcept = default;
Matcher& Matcher::operator=(Matcher&&) noexcept = default;

void Matcher::MaskLogits(std::span<float> logits) {
  int64_t shape = static_cast<int64_t>(impl_->bits.size());
  DLTensor t{};
  t.data = impl_->bits.data();
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 1;
  t.dtype = DLDataType{kDLInt, 32, 1};
  t.shape = &shape;
  bool masked = true;
  if (impl_->matcher) {
    try {
      masked = impl_->matcher->FillNextTokenBitmask(&t);
    } catch (const std::exception& e) {
      impl_->Fail(e);
    }
  }
  if (!impl_->matcher) std::fill(impl_->bits.begin(), impl_->bits.end(), 0);
  if (!masked) return;  // every id allowed
  const size_t n = std::min(logits.size(), static_cast<size_t>(impl_->grammar->impl().rows));
  constexpr float kNeg = -std::numeric_limits<float>::infinity();
  // Most of a JSON grammar's rows allow a few ids: whole words of 32 disallowed ids are filled at once.
  for (size_t w = 0; w * 32 < n; ++w) {
    const uint32_t word = static_cast<uint32_t>(impl_->bits[w]);
    if (word == 0xffffffffu) continue;
    const size_t begin = w * 32, end = std::min(n, begin + 32);
    if (word == 0) {
      std::fill(logits.begin() + static_cast<std::ptrdiff_t>(begin), logits.begin() + static_cast<std::ptrdiff_t>(end), kNeg);
      continue;
    }
    for (size_t i = begin; i < end; ++i)
      if (((word >> (i - begin)) & 1u) == 0) logits[i] = kNeg;
  }
  for (size_t i = n; i < logits.size(); ++i) logits[i] = kNeg;
}

bool Matcher::Accept(int32_t id) {
  if (id < 0 || id >= impl_->grammar->impl().rows || !impl_->matcher) return false;
  try {
    return impl_->matcher->AcceptToken(id);
  } catch (const std::exception& e) {
    impl_->Fail(e);
    return false;
  }
}

Matcher Matcher::Fork() const { return Matcher(std::make_unique<Impl>(*impl_)); }

const std::string& Matcher::error() const { return impl_->error; }

bool Matcher::terminated() const { return impl_->matcher && impl_->matcher->IsTerminated(); }

}  // namespace phi4mm::grammar
