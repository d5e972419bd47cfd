// Grammars that constrain generated text, token by token: a compiler that turns a JSON Schema (or
// "any JSON value") into an immutable compiled grammar over the model's vocabulary, caching the
// result by the schema's digest, and a matcher that walks one answer through a compiled grammar,
// giving the tokens allowed next as a bitmask and accepting the token chosen. The engine behind it
// is XGrammar's C++ core (built by scripts/setup.sh; grammar_xgrammar.cc); a build without it
// (PHI4MM_GRAMMAR=OFF) links grammar_unavailable.cc, whose compiler refuses with a clear error.
// Schemas are checked first by CheckSchemaSupported (schema_support.h): what the engine would
// ignore is refused, never silently left unconstrained.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "phi4mm/base/status.h"

namespace phi4mm {

class Tokenizer;

namespace grammar {

// What the compiler needs to know of the vocabulary.
struct Vocabulary {
  std::vector<std::string> token_bytes;  // per id: the token's bytes; "" for special ids (never allowed)
  int64_t rows = 0;                      // logits per row (ids >= token_bytes.size() are padding)
};
// The vocabulary of `tokenizer` for a model whose logits rows have `rows` entries.
Vocabulary VocabularyOf(const Tokenizer& tokenizer, int64_t rows);

// An immutable compiled grammar, shareable between requests and threads.
class CompiledGrammar {
 public:
  struct Impl;
  explicit CompiledGrammar(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  const Impl& impl() const { return *impl_; }
  size_t memory_bytes() const;

 private:
  std::shared_ptr<const Impl> impl_;
};

struct CompilerStats {
  int64_t compiled = 0, cache_hits = 0, cached = 0;  // compilations, hits, entries held now
  double compile_seconds = 0;                        // total time spent compiling
};

// Compiles grammars for one vocabulary; thread-safe. Compiled grammars are cached by the digest of
// what was compiled (at most `cache_entries`, least recently used dropped first).
class Compiler {
 public:
  static Result<std::shared_ptr<Compiler>> Create(const Vocabulary& vocab, size_t cache_entries = 256);
  ~Compiler();
  Compiler(const Compiler&) = delete;
  Compiler& operator=(const Compiler&) = delete;

  // A grammar accepting exactly the JSON texts that validate against `schema_json` (a JSON Schema
  // as text). With `strict`, objects accept only the listed properties unless additionalProperties
  // says otherwise (OpenAI's strict mode). Errors: InvalidArgument naming the JSON pointer of the
  // part that is malformed or that the engine cannot honour (CheckSchemaSupported).
  Result<std::shared_ptr<const CompiledGrammar>> JsonSchema(std::string_view schema_json, bool strict = true);
  // A grammar accepting any JSON value whose top level is an object (OpenAI's json_object mode).
  Result<std::shared_ptr<const CompiledGrammar>> JsonObject();
  CompilerStats stats() const;
  int64_t rows() const;

  struct Impl;

 private:
  explicit Compiler(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// One answer's position in a compiled grammar. Not thread-safe; one per request.
class Matcher {
 public:
  // `stop_ids`: the ids that end the grammar's text once it is complete (the only ids allowed then).
  Matcher(std::shared_ptr<const CompiledGrammar> grammar, std::span<const int32_t> stop_ids);
  ~Matcher();
  Matcher(Matcher&&) noexcept;
  Matcher& operator=(Matcher&&) noexcept;

  // Sets the logits of every id not allowed next to -infinity. `logits` has the grammar's rows.
  void MaskLogits(std::span<float> logits);
  // Advances past `id`; false (and no change) when the grammar does not allow it.
  bool Accept(int32_t id);
  // A copy in the same state that moves on its own (to try ids, e.g. a draft, without moving this one).
  Matcher Fork() const;
  // A stop id was accepted: the grammar's text is complete and ended.
  bool terminated() const;
  // Why the grammar engine failed ("" while it has not): a failed matcher allows no id.
  const std::string& error() const;

 private:
  struct Impl;
  explicit Matcher(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace grammar
}  // namespace phi4mm
