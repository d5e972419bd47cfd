// LongRoPE table construction in float32, following HF's operation order:
// inv_freq = 1 / (ext_factor * base ** (float(arange(0, dim, 2)) / dim)); freqs = pos * inv_freq;
// cos = cos(freqs) * attention_factor.
#include "phi4mm/models/rope.h"

#include <algorithm>

#include <cmath>

namespace phi4mm {

RotaryTables::RotaryTables(const TextConfig& cfg)
    : rotary_dim_(cfg.rotary_dim()),
      original_max_(cfg.original_max_position_embeddings),
      longrope_(!cfg.rope_short_factor.empty()),
      attention_factor_(static_cast<float>(cfg.rope_attention_factor)) {
  const int64_t half = rotary_dim_ / 2;
  const float base = static_cast<float>(cfg.rope_theta);
  for (int64_t i = 0; i < half; ++i) {
    const float expo = static_cast<float>(2 * i) / static_cast<float>(rotary_dim_);
    const float p = std::pow(base, expo);
    const float s = longrope_ ? static_cast<float>(cfg.rope_short_factor[i]) : 1.0f;
    const float l = longrope_ ? static_cast<float>(cfg.rope_long_factor[i]) : 1.0f;
    inv_freq_short_.push_back(1.0f / (s * p));
    inv_freq_long_.push_back(1.0f / (l * p));
  }
  if (!longrope_) attention_factor_ = 1.0f;
}

bool RotaryTables::UseLong(int64_t seq_len) const { return longrope_ && seq_len > original_max_; }

int64_t RotaryTables::RowsOnSameTable(int64_t seq_len, int64_t most) const {
  if (most <= 0) return 0;
  return UseLong(seq_len) || !longrope_ ? most : std::clamp<int64_t>(original_max_ - seq_len, 0, most);
}

void RotaryTables::CosSin(int64_t pos, bool long_table, float* cos, float* sin) const {
  const std::vector<float>& inv = long_table ? inv_freq_long_ : inv_freq_short_;
  const int64_t half = rotary_dim_ / 2;
  const float fp = static_cast<float>(pos);
  for (int64_t i = 0; i < half; ++i) {
    const float f = fp * inv[i];
    const float c = std::cos(f) * attention_factor_;
    const float s = std::sin(f) * attention_factor_;
    cos[i] = cos[i + half] = c;
    sin[i] = sin[i + half] = s;
  }
}

}  // namespace phi4mm
