// Shared pieces of the ONNX exporter (docs/onnx-export.md): the export options, the graph
// contract's names (those of Microsoft's Phi-4-multimodal-instruct-onnx package, which ONNX
// Runtime GenAI's `phi4mm` model type binds by name), and checkpoint tensors read as float32
// (transposed for MatMul) through the manifest's names and shapes.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "phi4mm/base/status.h"
#include "phi4mm/io/checkpoint.h"
#include "phi4mm/io/model_config.h"
#include "phi4mm/onnx/onnx_writer.h"

namespace phi4mm::exporter {

struct ExportOptions {
  // fp32: float32 weights and I/O. fp16: float16 weights and I/O. int4: the decoder's linears as
  // 4-bit MatMulNBits and its lm_head and LoRA adapters as 8-bit ones (the engine's q4 policy),
  // with float32 I/O and the other parts in float32 for cpu, float16 for cuda.
  std::string precision = "fp32";
  std::string target = "cpu";  // cpu | cuda: the session providers of genai_config.json, the int4 I/O type
                               // and MatMulNBits' accuracy_level (4 = int8 activations on cpu, 0 on cuda)
  // How the decoder carries the vision and speech LoRA (docs/onnx-export.md): "if" runs each
  // adapter inside an If on its gate, so a step reads only the adapter it uses (the default: at
  // full size int4 on the CPU it decodes text at 97% of the bare decoder's speed, the gated sum at
  // 69%); "sum" adds both adapters times their 0/1 gates in every LoRA'd projection (no control
  // flow, for runtimes without If); "none" leaves them out (the bare language model).
  std::string lora = "if";
  // Refuse a checkpoint whose package ONNX Runtime could not run (RunnableByOrt), instead of writing
  // one that fails at its first step. Off only to test the writer on the tiny fixture (head_dim 8).
  bool require_runnable = true;
  Status Validate() const;

  // The element type of the package's float tensors.
  onnx_writer::ElemType RealType() const;
  bool Int4() const { return precision == "int4"; }
  int64_t AccuracyLevel() const { return target == "cpu" ? 4 : 0; }
};

// Whether ONNX Runtime's GroupQueryAttention can run this decoder: it needs a head size that is a
// multiple of 16 (onnxruntime 1.32 refuses every other at the first run: "head_size shall be a
// multiple of 16"). An Unsupported status naming the head size and the limit otherwise.
Status RunnableByOrt(const ModelConfig& cfg);

// File names of the package.
inline constexpr const char* kTextFile = "phi-4-mm-text.onnx";
inline constexpr const char* kEmbeddingFile = "phi-4-mm-embedding.onnx";
inline constexpr const char* kVisionFile = "phi-4-mm-vision.onnx";
inline constexpr const char* kSpeechFile = "phi-4-mm-speech.onnx";

// Decoder I/O names (genai_config.json `decoder.inputs` / `outputs`).
inline constexpr const char* kInputsEmbeds = "inputs_embeds";
inline constexpr const char* kAttentionMask = "attention_mask";
inline constexpr const char* kInputIds = "input_ids";
inline constexpr const char* kLogits = "logits";
std::string PastKeyName(int64_t layer);    // past_key_values.<l>.key
std::string PastValueName(int64_t layer);  // past_key_values.<l>.value
std::string PresentKeyName(int64_t layer);    // present.<l>.key
std::string PresentValueName(int64_t layer);  // present.<l>.value
// Embedding model I/O names.
inline constexpr const char* kImageFeatures = "image_features";
inline constexpr const char* kAudioFeatures = "audio_features";

// Tensor `name` seen as [rows, cols], float32, row-major; `shape` is its stored shape when that is
// not [rows, cols] (a 1-wide convolution kernel [out, in, 1], a bias [1, d, 1]).
Result<std::vector<float>> ReadFloats(const Checkpoint& ckpt, const std::string& name, int64_t rows, int64_t cols,
                                      const std::vector<int64_t>& shape = {});
// Tensor `name` [rows, cols] transposed to [cols, rows] float32, times `scale`.
Result<std::vector<float>> ReadTransposed(const Checkpoint& ckpt, const std::string& name, int64_t rows, int64_t cols,
                                          float scale = 1.0f, const std::vector<int64_t>& shape = {});

// Adds to the main graph a Loop over the items (images, clips) counted by dimension 0 of the input
// `count_of`: the body `item(body, index)` builds one item's features [tokens, hidden] from the
// loop index, and the loop concatenates them in item order into the graph's `output`
// [total tokens, hidden] (of the package's float type; no items give zero rows). `name` names the
// body subgraph and its loop variables.
Status AddConcatLoop(onnx_writer::ModelWriter* w, const std::string& name, const std::string& count_of, int64_t hidden,
                     const std::string& output,
                     const std::function<Result<std::string>(onnx_writer::Graph& body, const std::string& index)>& item);

}  // namespace phi4mm::exporter
