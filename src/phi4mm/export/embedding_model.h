// The embedding model of the package, phi-4-mm-embedding.onnx (TokenEmbedding::EmbedWithMedia,
// models/embedding.h): the token table looked up with Gather, then the k-th 200010 position takes
// row k of `image_features` and the k-th 200011 row k of `audio_features` (NonZero + ScatterND;
// ORT GenAI passes [0, hidden] features when a modality is absent and at every decode step).
#pragma once

#include <string>

#include "phi4mm/export/export_common.h"
#include "phi4mm/io/model_config.h"

namespace phi4mm::exporter {

// Writes `out_dir/phi-4-mm-embedding.onnx` (+ .data); returns the external data bytes.
Result<uint64_t> WriteEmbeddingModel(const Checkpoint& ckpt, const ModelConfig& cfg, const std::string& out_dir,
                                     const ExportOptions& opts);

}  // namespace phi4mm::exporter
