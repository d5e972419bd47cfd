// libFuzzer target for JSON Schemas from clients: CheckSchemaSupported on arbitrary bytes and, for
// what it accepts, SchemaForEngine (the rewrite handed to the grammar engine), which must again be
// accepted and be stable (rewriting its own output changes nothing). Compiling is left out (each
// compile indexes the grammar against 200k tokens, too slow for fuzzing); the C++ and Python
// suites compile hundreds of schemas. A crash, a sanitizer report or a broken promise is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "phi4mm/grammar/schema_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 64 * 1024) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const phi4mm::Status st = phi4mm::grammar::CheckSchemaSupported(text);
  if (!st.ok()) {
    if (st.message().empty()) std::abort();
    return 0;
  }
  const std::string once = phi4mm::grammar::SchemaForEngine(text);
  if (!phi4mm::grammar::CheckSchemaSupported(once).ok()) std::abort();
  if (phi4mm::grammar::SchemaForEngine(once) != once) std::abort();
  return 0;
}
