// The speech model of the package, phi-4-mm-speech.onnx (SpeechModel::Encode, models/speech.h):
// per clip (a Loop), the Conformer encoder over the clip's valid frames (NeMo conv subsampling,
// 500-frame chunks, T5 relative bias, conv module, macaron feed-forwards), then the speech or the
// vision-speech projection as `audio_projection_mode` says (1 or 3: an image is present); clips'
// tokens concatenated into audio_features [Σ audio_sizes, text hidden].
#pragma once

#include <string>

#include "phi4mm/export/export_common.h"
#include "phi4mm/io/model_config.h"

namespace phi4mm::exporter {

// Writes `out_dir/phi-4-mm-speech.onnx` (+ .data); returns the external data bytes.
Result<uint64_t> WriteSpeechModel(const Checkpoint& ckpt, const ModelConfig& cfg, const std::string& out_dir,
                                  const ExportOptions& opts);

}  // namespace phi4mm::exporter
