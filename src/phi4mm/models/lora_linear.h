// A bias-free linear layer with optional per-modality LoRA adapters, as PEFT's lora.Linear
// computes it (reference-spec §6.2): y = W·x + (B·(A·x)) · (alpha / r), with at most one adapter
// active (chosen by LoraMode). The base matrix may be converted at load (bf16, Q8_0, Q4_K), and
// the low-rank adapters too (bf16 under bf16 and q8, Q4_K under q4, Q8_0 under q4m: the manifest's
// FormatFor). Weights are immutable and shared; scratch comes from the caller.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "phi4mm/io/checkpoint.h"
#include "phi4mm/kernels/weight_matrix.h"
#include "phi4mm/models/lora_mode.h"

namespace phi4mm {

// Rows [begin, end) of a batch that share one LoRA mode (a batched step sorts its rows by mode).
struct LoraSegment {
  int64_t begin = 0, end = 0;
  LoraMode mode = LoraMode::kNone;
};

struct LoraAdapter {
  WeightMatrix a;  // [r, in]
  WeightMatrix b;  // [out, r], or [out, r - tail] when b_tail holds B's last columns
  // Q4_K stores 256 values a block, so a rank that is not a multiple of 256 pads every row of B to
  // whole blocks: the speech adapter's 320 = 256 + 64 would store 512 (three eighths of its B, 95 MB
  // of a mixed step's reads on the real model, zeros). Under Q4_K the last `tail` (<= 128) columns
  // of `pack` = 256 / tail consecutive rows of B share one row of b_tail [ceil(out / pack), 256]:
  // row o's tail sits at columns [(o % pack) * tail, + tail) of row o / pack. The product runs
  // b_tail against `pack` activation rows per low-rank row, each the row's tail at one of those
  // slots and zeros elsewhere, and adds the diagonal. The zeros add nothing (Q4_K's min terms
  // included), so it computes what the padded rows did; only the tail's Q4_K scales are shared by
  // the `pack` rows (quantized from the padded rows' values, so a pre-quantized checkpoint loads to
  // the same bytes).
  WeightMatrix b_tail;
  int64_t tail = 0, pack = 1;
  float scale = 1.0f;
  size_t bytes() const { return a.bytes() + b.bytes() + b_tail.bytes(); }
};

// Moves the last r % 256 columns of a Q4_K B [out, r] into ad->b_tail when there are at most 128 of
// them (Load does it to every adapter; nothing to do otherwise). The tail values are those the
// padded rows hold, re-quantized in their packed rows.
Status PackQ4KTail(LoraAdapter* ad, ThreadPool* pool = nullptr);

class LoraLinear {
 public:
  LoraLinear() = default;
  // From matrices already in the active kernel table's layout (benchmarks, tests).
  LoraLinear(WeightMatrix base, std::optional<LoraAdapter> vision, std::optional<LoraAdapter> speech)
      : base_(std::move(base)), vision_(std::move(vision)), speech_(std::move(speech)) {}
  // Loads `<prefix>.weight` [out, in] and, when the config has them, the adapters
  // `<prefix>.lora_{A,B}.{vision,speech}.weight`. Shapes are checked against the config. The base
  // weight is converted to `base_format` and the adapters to `adapter_format` when set (the
  // decoder passes the manifest's policy: DecoderLinearFormat and FormatFor kLoraA,
  // models/tensor_manifest.h; rows split over `pool`).
  static Result<LoraLinear> Load(const Checkpoint& ckpt, const ModelConfig& cfg, const std::string& prefix,
                                 int64_t out_features, int64_t in_features,
                                 std::optional<WeightFormat> base_format = std::nullopt,
                                 std::optional<WeightFormat> adapter_format = std::nullopt,
                                 ThreadPool* pool = nullptr);

  int64_t out_features() const { return base_.rows(); }
  int64_t in_features() const { return base_.cols(); }
  const WeightMatrix& base() const { return base_; }
  const LoraAdapter* adapter(LoraMode mode) const;

  // y[n, out] = x[n, in]·Wᵀ (+ the active adapter's update). `scratch` is resized as needed.
  void Forward(const float* x, int64_t n, float* y, LoraMode mode, ThreadPool* pool,
               std::vector<float>* scratch) const;
  // The batched form (server-spec §3.3, the CPU analogue of S-LoRA's segmented GEMV): the base
  // product once over all n rows, then each segment's adapter over that segment's rows only, so an
  // adapter's bytes are read once per step whatever the number of its rows. Segments must not
  // overlap; rows outside every segment get the base product only. Each row's result equals
  // Forward on that row alone to 1e-5 of the scale (bit for bit where the kernel table's batch and
  // GEMV tiles reduce a row alike: all but AVX2's Q4_K). The passes share two pool loops
  // (MatMulPlan): every segment's A pass in one, then the base product with every segment's B pass
  // over the same output rows in the other, so a mixed batch pays no pool hand-off, thread split
  // or load imbalance per pass and streams B beside the base rows.
  void Forward(const float* x, int64_t n, float* y, std::span<const LoraSegment> segments, ThreadPool* pool,
               std::vector<float>* scratch) const;

 private:
  WeightMatrix base_;
  std::optional<LoraAdapter> vision_, speech_;
};

}  // namespace phi4mm
