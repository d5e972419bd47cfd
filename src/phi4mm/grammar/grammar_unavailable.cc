// The grammar layer of a build without XGrammar (PHI4MM_GRAMMAR=OFF, e.g. the aarch64 cross
// build): the compiler cannot be created, and says how to get one. Schemas are still checked, so
// the error a client sees for a bad schema does not depend on the build.
#include <cmath>
#include <limits>

#include "phi4mm/grammar/grammar.h"
#include "phi4mm/grammar/schema_support.h"

namespace phi4mm::grammar {

struct CompiledGrammar::Impl {};
size_t CompiledGrammar::memory_bytes() const { return 0; }

struct Compiler::Impl {};

Result<std::shared_ptr<Compiler>> Compiler::Create(const Vocabulary&, size_t) {
  return Unsupported("this phi4mm was built without a grammar engine (PHI4MM_GRAMMAR=OFF), so structured output "
                     "(JSON mode, JSON Schema, forced tool calls) is not available; rebuild after scripts/setup.sh "
                     "with PHI4MM_GRAMMAR=ON");
}
Compiler::Compiler(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Compiler::~Compiler() = default;
int64_t Compiler::rows() const { return 0; }
CompilerStats Compiler::stats() const { return {}; }
Result<std::shared_ptr<const CompiledGrammar>> Compiler::JsonSchema(std::string_view schema_json, bool) {
  PHI4MM_RETURN_IF_ERROR(CheckSchemaSupported(schema_json));
  return Unsupported("this phi4mm was built without a grammar engine");
}
Result<std::shared_ptr<const CompiledGrammar>> Compiler::JsonObject() {
  return Unsupported("this phi4mm was built without a grammar engine");
}

struct Matcher::Impl {};
Matcher::Matcher(std::shared_ptr<const CompiledGrammar>, std::span<const int32_t>) {}
Matcher::Matcher(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Matcher::~Matcher() = default;
Matcher::Matcher(Matcher&&) noexcept = default;
Matcher& Matcher::operator=(Matcher&&) noexcept = default;
void Matcher::MaskLogits(std::span<float> logits) {
  for (float& x : logits) x = -std::numeric_limits<float>::infinity();
}
bool Matcher::Accept(int32_t) { return false; }
Matcher Matcher::Fork() const { return Matcher(std::make_unique<Impl>()); }
bool Matcher::terminated() const { return false; }
const std::string& Matcher::error() const {
  static const std::string kError = "this phi4mm was built without a grammar engine";
  return kError;
}

}  // namespace phi4mm::grammar
