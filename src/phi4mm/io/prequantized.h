// Pre-quantized checkpoints (`phi4mm quantize`): the ConversionLog that records what the weight
// loaders convert while a model loads with some LoadOptions::quant, and the writer that turns an
// opened checkpoint plus that log into a folder a later start maps without converting anything.
// The folder keeps the input's layout, file names, tensor names and every other file (config,
// tokenizer, processor configs, the PEFT adapter configs); each converted tensor is stored as U8
// [rows, row_bytes] rows of its storage format, described in the file's metadata (safetensors.h).
// See docs/design.md, "Pre-quantized checkpoints".
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "phi4mm/base/status.h"
#include "phi4mm/io/checkpoint.h"

namespace phi4mm {

class ConversionLog {
 public:
  struct Entry {
    std::string format;  // WeightFormatName of the storage
    int64_t rows = 0, cols = 0;
    std::shared_ptr<const uint8_t> bytes;  // rows x row_bytes of storage, kept alive by the pointer
    size_t nbytes = 0;
  };
  // Thread-safe. A tensor recorded twice in different formats is remembered as a conflict.
  void Record(const std::string& canonical_name, Entry e);
  std::map<std::string, Entry> entries() const;
  // The first tensor recorded in two formats ("" when none): its name and both formats.
  std::string conflict() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, Entry> entries_;
  std::string conflict_;
};

struct PrequantizedWriteStats {
  size_t weight_files = 0;   // safetensors files written
  size_t other_files = 0;    // files copied as they are
  size_t packed_tensors = 0; // tensors stored in a converted format
  uint64_t bytes_in = 0;     // the input's safetensors files
  uint64_t bytes_out = 0;    // the output's safetensors files
};

// Writes `ckpt` into `out_dir` (created when missing; existing files are overwritten) with the
// tensors `log` recorded replaced by their converted storage, marked as pre-quantized with `quant`
// (a QuantModeName). Hidden entries (names starting with '.') are not copied.
Result<PrequantizedWriteStats> WritePrequantizedCheckpoint(const Checkpoint& ckpt, const ConversionLog& log,
                                                           const std::string& quant, const std::string& out_dir);

}  // namespace phi4mm
