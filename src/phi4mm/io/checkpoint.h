// A Hugging Face checkpoint folder opened for reading: every safetensors shard (through
// `model.safetensors.index.json` when sharded), plus the native layout's PEFT adapter folders,
// exposed under ONE canonical naming so model code never sees layout differences.
//
// Canonical names are the native transformers names (reference-spec §8), with LoRA tensors named
// `<module>.lora_A.<adapter>.weight` / `<module>.lora_B.<adapter>.weight` (adapter = vision|speech),
// as in Microsoft's original layout. The original layout's names are mapped by
// CanonicalNameFromOriginal (the inverse of transformers' convert_phi4_multimodal_weights_to_hf).
//
// A folder written by `phi4mm quantize` opens the same way; its packed tensors carry their storage
// format (TensorView::packed) and prequantized() names the quant mode it was written with. While a
// ConversionLog is attached, the weight loaders report every tensor they convert to it.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "phi4mm/io/model_config.h"
#include "phi4mm/io/safetensors.h"

namespace phi4mm {

class ConversionLog;  // io/prequantized.h

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
  CheckpointLayout layout() const { return layout_; }
  // The safetensors files opened, and the canonical name of tensor `stored_name` of files()[i].
  const std::vector<SafetensorsFile>& files() const { return files_; }
  std::string CanonicalNameIn(size_t file_index, const std::string& stored_name) const;
  // The quant mode the folder was written with by `phi4mm quantize` ("q4", ...), or "" when it
  // holds the checkpoint as published.
  const std::string& prequantized() const { return prequantized_; }

  // While set (phi4mm quantize), LoadWeight records every conversion into `log` (not owned).
  void set_conversion_log(ConversionLog* log) { conversion_log_ = log; }
  ConversionLog* conversion_log() const { return conversion_log_; }
  // The quant mode the folder is being loaded in (a QuantModeName; "none" = as stored). A
  // pre-quantized tensor whose format differs from what that mode asks for today is kept as stored
  // when this is the folder's own mode (an earlier phi4mm wrote it with another per-tensor policy,
  // e.g. 8-bit LoRA adapters under q4), and refused otherwise.
  void set_load_mode(std::string mode) { load_mode_ = std::move(mode); }
  const std::string& load_mode() const { return load_mode_; }

 private:
  Status AddFile(const std::string& path, const std::string& adapter);

  std::string dir_;
  CheckpointLayout layout_ = CheckpointLayout::kNative;
  std::string prequantized_;
  ConversionLog* conversion_log_ = nullptr;
  std::string load_mode_;
  std::vector<SafetensorsFile> files_;
  std::vector<std::string> file_adapters_;
  std::map<std::string, TensorView> tensors_;
  std::map<std::string, std::string> source_names_;
};

}  // namespace phi4mm
