// A loaded model described as JSON: folder, layout, files, weight bytes and pre-quantization,
// parameter counts by part and dtype, the decoder's shape, the LoRA adapters, context, KV cache,
// EOS ids and the kernel tables. What `phi4mm info --json` prints and the Python package's
// `Model.info` returns, so both describe a checkpoint alike.
#pragma once

#include <nlohmann/json.hpp>

#include "phi4mm/runtime/model.h"

namespace phi4mm::server {

nlohmann::json ModelJson(const Model& model);

}  // namespace phi4mm::server
