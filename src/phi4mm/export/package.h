// `phi4mm export`: the ONNX Runtime GenAI `phi4mm` package written from a checkpoint folder
// (either layout): the four models (text decoder, embedding, vision, speech), genai_config.json (type phi4mm, no
// adapter_filename: the LoRA is inside the decoder), vision_processor.json,
// speech_processor.json (with "max_samples": 0, so audio over 30 s is not cut) and the tokenizer
// files (docs/onnx-export.md).
#pragma once

#include <string>
#include <vector>

#include "phi4mm/export/export_common.h"
#include "phi4mm/io/model_config.h"

namespace phi4mm::exporter {

struct PackageSummary {
  std::vector<std::string> files;    // written, relative to the output folder
  int64_t kv_layers = 0;
  bool lora_register = false;  // the decoder carries the LoRA gates in an extra KV layer
  uint64_t external_bytes = 0;
};

Result<PackageSummary> ExportPackage(const std::string& model_dir, const std::string& out_dir,
                                     const ExportOptions& opts);

// The JSON files of the package, as text (exposed for tests).
std::string GenaiConfigJson(const ModelConfig& cfg, int64_t kv_layers, const ExportOptions& opts);
std::string VisionProcessorJson(const ModelConfig& cfg);
std::string SpeechProcessorJson(const ModelConfig& cfg);

}  // namespace phi4mm::exporter
