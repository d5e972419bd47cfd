// A Hugging Face checkpoint folder opened for reading: every safetensors shard (through
// `model.safetensors.index.json` when sharded), plus the native layout's PEFT adapter folders,
// exposed under ONE canonical naming so model code never sees layout differences.
//
// Canonical names are the native transformers names (reference-spec §8), with LoRA tensors named
// `<module>.lora_A.<adapter>.weight` / `<module>.lora_B.<adapter>.weight` (adapter = vision|speech),
// as in Microsoft's original layout. The original layout's names are mapped by
// CanonicalNameFromOriginal (the inverse of transformers' convert_phi4_multimodal_weights_to_hf).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "phi4mm/io/model_config.h"
#include "phi4mm/io/safetensors.h"

namespace phi4mm {

std::string CanonicalNameFromOriginal(const std::string& name);
// PEFT adapter file key ("base_model.model.<module>.lora_A.weight") -> canonical LoRA name.
std::string CanonicalNameFromPeft(const std::string& name, const std::string& adapter);

class Checkpoint {
 public:
  static Result<Checkpoint> Open(const std::string& dir, CheckpointLayout layout);

  // nullptr when absent.
  const TensorView* Find(const std::string& name) const;
  // The tensor, checked to exist and to have exactly `shape`; the error names both shapes.
  Result<TensorView> Get(const std::string& name, const std::vector<int64_t>& shape) const;
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  // The name as stored in the file (for messages), or the canonical name.
  std::string SourceName(const std::string& name) const;
  const std::string& dir() const { return dir_; }
  size_t num_files() const { return files_.size(); }

 private:
  Status AddFile(const std::string& path, const std::string& adapter, CheckpointLayout layout);

  std::string dir_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, TensorView> tensors_;
  std::map<std::string, std::string> source_names_;
};

}  // namespace phi4mm
