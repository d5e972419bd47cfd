// Rotary position tables for the Phi-4-mini decoder: partial rotary (rotary_dim = head_dim *
// partial_rotary_factor) with LongRoPE short/long rescale factors and the attention factor applied
// to both cos and sin. Mirrors HF `_compute_longrope_parameters` + `Phi4MultimodalRotaryEmbedding`
// (and the original `Phi4MMLongRoPEScaledRotaryEmbedding`): the long table is used for a forward
// pass iff max(position)+1 > original_max_position_embeddings.
#pragma once

#include <cstdint>
#include <vector>

#include "phi4mm/io/model_config.h"

namespace phi4mm {

class RotaryTables {
 public:
  explicit RotaryTables(const TextConfig& cfg);
  int64_t rotary_dim() const { return rotary_dim_; }
  // Whether a forward pass whose last position is `seq_len - 1` uses the long factors: the one
  // LongRoPE switch, asked by sessions, the engine's policy and perplexity alike (a cache built
  // with the other table is recomputed, reference-deviations.md).
  bool UseLong(int64_t seq_len) const;
  // How many rows, at most `most`, can follow a sequence of `seq_len` on the table it uses (a
  // speculative draft that would switch tables is cut there).
  int64_t RowsOnSameTable(int64_t seq_len, int64_t most) const;
  // cos/sin[rotary_dim] for position `pos` (the frequency half repeated twice), times the
  // attention factor, float32 exactly as HF computes them.
  void CosSin(int64_t pos, bool long_table, float* cos, float* sin) const;

 private:
  int64_t rotary_dim_;
  int64_t original_max_;
  bool longrope_;
  float attention_factor_;
  std::vector<float> inv_freq_short_, inv_freq_long_;
};

}  // namespace phi4mm
