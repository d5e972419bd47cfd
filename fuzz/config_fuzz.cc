// libFuzzer target for config.json parsing: ModelConfig::ParseConfigJson on arbitrary text, then
// Validate on whatever parsed, and the derived values a validated config promises (rotary_dim even
// and positive, heads divisible by kv heads). Any crash, sanitizer report or abort is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "phi4mm/io/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto r = phi4mm::ModelConfig::ParseConfigJson(text, "fuzz config.json");
  if (!r.ok()) {
    if (r.status().message().empty()) std::abort();
    return 0;
  }
  const phi4mm::Status st = r->Validate();
  if (!st.ok()) {
    if (st.message().empty()) std::abort();
    return 0;
  }
  const phi4mm::TextConfig& t = r->text;
  const int64_t rd = t.rotary_dim();
  if (rd <= 0 || rd % 2 != 0) std::abort();
  if (t.num_attention_heads % t.num_key_value_heads != 0) std::abort();
  if (!t.rope_short_factor.empty() && t.rope_short_factor.size() != static_cast<size_t>(rd / 2)) std::abort();
  return 0;
}
