// The model's configuration, read from a checkpoint folder in either layout: Microsoft's original
// (`config.json` with model_type "phi4mm", `embd_layer`, `audio_processor`, `vision_lora`,
// `speech_lora`) or the native transformers port (model_type "phi4_multimodal", `vision_config`,
// `audio_config`, PEFT adapter folders `vision-lora/` and `speech-lora/`). Also reads
// `generation_config.json` and `preprocessor_config.json`. Every value the engine uses is checked
// for consistency here, so later code can trust it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "phi4mm/base/status.h"

namespace phi4mm {

enum class CheckpointLayout { kOriginal, kNative };
const char* LayoutName(CheckpointLayout l);

// Phi-4-mini decoder (reference: Phi4MultimodalConfig text fields / Phi4MMConfig).
struct TextConfig {
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  double partial_rotary_factor = 1.0;
  int64_t max_position_embeddings = 0;
  int64_t original_max_position_embeddings = 0;
  // Absent from config.json: false, as transformers' PretrainedConfig reads it (Microsoft's config
  // sets it to true).
  bool tie_word_embeddings = false;
  // LongRoPE; empty factors mean plain RoPE.
  std::vector<double> rope_short_factor;
  std::vector<double> rope_long_factor;
  double rope_attention_factor = 1.0;  // derived as in HF _compute_longrope_parameters unless given
  int64_t rotary_dim() const { return static_cast<int64_t>(head_dim * partial_rotary_factor); }
};

// SigLIP-NaViT tower + projection (reference: Phi4MultimodalVisionConfig / get_siglip_vision_model).
struct VisionConfig {
  int64_t hidden_size = 1152;
  int64_t intermediate_size = 4304;
  int64_t num_hidden_layers = 27;
  int64_t num_attention_heads = 16;
  int64_t image_size = 448;
  int64_t patch_size = 14;
  int64_t crop_size = 448;
  int64_t feature_layer = -2;
  double layer_norm_eps = 1e-6;
  int64_t image_token_id = 200010;
};

// Conformer encoder + projections (reference: Phi4MultimodalAudioConfig / audio_processor.config).
struct AudioConfig {
  int64_t input_size = 80;
  int64_t hidden_size = 1024;
  int64_t num_attention_heads = 16;
  int64_t intermediate_size = 1536;
  int64_t num_blocks = 24;
  int64_t nemo_conv_channels = 1024;
  int64_t kernel_size = 3;
  int64_t time_reduction = 8;
  int64_t ext_pw_out_channel = 1024;
  int64_t depthwise_separable_out_channel = 1024;
  int64_t depthwise_multiplier = 1;
  int64_t bias_max_distance = 500;
  int64_t left_chunk = 18;
  int64_t chunk_size = -1;
  int64_t audio_token_id = 200011;
};

struct LoraAdapterConfig {
  bool present = false;
  int64_t rank = 0;
  double alpha = 0;
  double scale() const { return rank > 0 ? alpha / static_cast<double>(rank) : 0.0; }
};

struct GenerationDefaults {
  std::vector<int32_t> eos_token_ids;  // stop ids
  int32_t bos_token_id = 199999;
  int32_t pad_token_id = 199999;
};

struct PreprocessorConfig {
  int64_t dynamic_hd = 36;
  int64_t audio_compression_rate = 8;
  int64_t audio_downsample_rate = 1;
  int64_t audio_feat_stride = 1;
};

struct ModelConfig {
  CheckpointLayout layout = CheckpointLayout::kOriginal;
  std::string model_type;
  std::string torch_dtype;
  TextConfig text;
  VisionConfig vision;
  AudioConfig audio;
  LoraAdapterConfig vision_lora;
  LoraAdapterConfig speech_lora;
  GenerationDefaults generation;
  PreprocessorConfig preprocessor;

  // Reads config.json (+ generation_config.json, preprocessor_config.json, and for the native
  // layout vision-lora/adapter_config.json, speech-lora/adapter_config.json) from `dir`.
  static Result<ModelConfig> LoadFromDir(const std::string& dir);
  // Parses config.json text alone (no side files); `label` names it in errors.
  static Result<ModelConfig> ParseConfigJson(const std::string& text, const std::string& label);
  Status Validate() const;
};

}  // namespace phi4mm
