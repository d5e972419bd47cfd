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
  WeightMatrix b;  // [out, r]
  float scale = 1.0f;
};

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
  // GEMV tiles reduce a row alike: all but AVX2's Q4_K).
  void Forward(const float* x, int64_t n, float* y, std::span<const LoraSegment> segments, ThreadPool* pool,
               std::vector<float>* scratch) const;

 private:
  WeightMatrix base_;
  std::optional<LoraAdapter> vision_, speech_;
};

}  // namespace phi4mm
