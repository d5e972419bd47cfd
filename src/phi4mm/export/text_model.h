// The text decoder of the package, phi-4-mm-text.onnx (docs/onnx-export.md "The text decoder"):
// the Phi-4-mini decoder of models/decoder.cc as ONNX Runtime contrib ops, GroupQueryAttention with
// packed QKV and fused partial rotary, LongRoPE short/long cos-sin caches picked by an If on the
// total length as ORT GenAI's builder does, SkipSimplifiedLayerNormalization, last-position logits
// only, and both modality LoRA adapters inside the graph, gated per request from `input_ids`
// with the gate kept across decode steps in one extra "mode register" KV layer.
#pragma once

#include <string>

#include "phi4mm/export/export_common.h"
#include "phi4mm/io/model_config.h"

namespace phi4mm::exporter {

struct TextModelInfo {
  int64_t kv_layers = 0;  // num_hidden_layers for genai_config.json (real layers + the register)
  uint64_t external_bytes = 0;
};

// Writes `out_dir/phi-4-mm-text.onnx` (+ .data) from the checkpoint.
Result<TextModelInfo> WriteTextModel(const Checkpoint& ckpt, const ModelConfig& cfg, const std::string& out_dir,
                                     const ExportOptions& opts);

}  // namespace phi4mm::exporter
