// The one way model parts turn a checkpoint tensor into a WeightMatrix: a zero-copy view of the
// stored tensor (the checkpoint's memory map), or a copy converted to a requested format at load,
// in which case the stored pages are dropped from the resident set because they are not read
// again. Every loader (decoder, LoRA adapters, embedding, vision, speech) goes through here, so a
// new storage source plugs in at one place: a pre-quantized checkpoint (`phi4mm quantize`) gives
// views of its packed rows, and a checkpoint with a ConversionLog attached records each conversion.
// A matrix whose format the active kernel table reads in a compute layout of its own (WeightLayout:
// the Q8_0 groups of the avx512, avxvnni and neondot tables) is repacked to it here, once, unless a
// ConversionLog is attached (what `phi4mm quantize` writes is the file layout).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "phi4mm/base/status.h"
#include "phi4mm/base/thread_pool.h"
#include "phi4mm/io/checkpoint.h"
#include "phi4mm/kernels/weight_matrix.h"

namespace phi4mm {

// Tensor `name` of exactly `shape` (any rank), seen as a [rows, cols] matrix (rows * cols must be
// its element count), converted to `format` when set (rows split over `pool`). Errors name the
// tensor as the checkpoint stores it. A pre-quantized tensor is a view of its stored format when
// `format` is unset or equal to it, and an error naming the folder's quant mode otherwise (it is
// never re-quantized).
Result<WeightMatrix> LoadWeight(const Checkpoint& ckpt, const std::string& name, const std::vector<int64_t>& shape,
                                int64_t rows, int64_t cols, std::optional<WeightFormat> format = std::nullopt,
                                ThreadPool* pool = nullptr);

// Tensor `name` of exactly `shape`, as float32 values (biases, norms, small parameters).
Result<std::vector<float>> LoadFloats(const Checkpoint& ckpt, const std::string& name,
                                      const std::vector<int64_t>& shape);

}  // namespace phi4mm
