// Turning a request's text, images and audio into what a Session consumes: prompt ids with the
// placeholders expanded, the image/audio feature rows from the `vision` and `speech` parts, and
// the request's LoRA mode (reference: Phi4MMProcessor + Phi4MMForCausalLM.forward's input_mode).
// CountPrompt does the same bookkeeping without running the encoders, so a user can see what an
// image or clip costs before paying for it.
#pragma once

#include <atomic>
#include <string>
#include <string_view>
#include <vector>

#include "phi4mm/preprocess/audio.h"
#include "phi4mm/preprocess/audio_features.h"
#include "phi4mm/preprocess/image_processor.h"
#include "phi4mm/preprocess/image.h"
#include "phi4mm/runtime/session.h"

namespace phi4mm {

struct MediaInputs {
  std::vector<Image> images;
  std::vector<AudioClip> audios;
  bool empty() const { return images.empty() && audios.empty(); }
};

struct PromptOptions {
  int64_t dynamic_hd = 0;     // maximum HD crops per image; 0 = preprocessor_config.json's value
  int64_t token_budget = -1;  // fail before encoding when the prompt needs more; -1 = context length
  // The conversation this prompt belongs to has an image (in this or an earlier turn): audio then
  // uses the vision-speech projection and the request the vision LoRA, as the reference computes
  // a conversation as one sequence.
  bool conversation_has_image = false;
  bool conversation_has_audio = false;
  // Preprocessing stops with Cancelled once this turns true (a client that left); checked between
  // media items and while the text is encoded.
  const std::atomic<bool>* cancel = nullptr;
};

struct PromptCount {
  std::vector<int64_t> image_tokens;  // per image, in order
  std::vector<int64_t> audio_tokens;  // per clip, in order
  int64_t text_tokens = 0;            // everything else
  int64_t total_tokens = 0;
};

struct PreparedPrompt {
  std::vector<int32_t> ids;
  MediaFeatures features;
  LoraMode mode = LoraMode::kNone;
  PromptCount count;
};

// A prompt after preprocessing and tokenization, before any encoder runs: what the batched engine
// admits, encodes piece by piece and prefills.
struct PreprocessedPrompt {
  std::vector<int32_t> ids;
  std::vector<ProcessedImage> images;
  std::vector<AudioFeatures> audios;
  PromptCount count;
  LoraMode mode = LoraMode::kNone;
  bool audio_with_image = false;  // audio uses the vision-speech projection
  int64_t dynamic_hd = 0;         // the crop limit the images were processed with
};

// Prepends "<|image_1|>\n...<|audio_1|>\n..." to `text` when it has no placeholders and media
// are given, as the reference prompts do; otherwise returns `text` unchanged.
std::string WithDefaultPlaceholders(std::string_view text, size_t num_images, size_t num_audios);

// Needs only the configuration and the tokenizer; `ids` (optional) receives the expanded prompt ids.
Result<PromptCount> CountPrompt(const ModelConfig& config, const Tokenizer& tokenizer, std::string_view rendered,
                                const MediaInputs& media, const PromptOptions& opts = {},
                                std::vector<int32_t>* ids = nullptr);
// Preprocessing, placeholder expansion and the budget check of PreparePrompt, without encoders.
Result<PreprocessedPrompt> PreprocessPrompt(const ModelConfig& config, const Tokenizer& tokenizer,
                                            std::string_view rendered, const MediaInputs& media,
                                            const PromptOptions& opts = {}, int64_t context_length = 0);
// `tap` (optional) receives the encoders' named tensors ("image.<k>.*", "audio.<k>.*").
Result<PreparedPrompt> PreparePrompt(const Model& model, std::string_view rendered, const MediaInputs& media,
                                     const PromptOptions& opts = {}, TensorTap* tap = nullptr);
// Runs the encoders over a preprocessed prompt (what PreparePrompt does after PreprocessPrompt).
Result<PreparedPrompt> EncodeMedia(const Model& model, PreprocessedPrompt p, TensorTap* tap = nullptr);

// A prompt given as token ids (placeholders already expanded) and the processor's tensors as
// another pipeline made them, batched and zero-padded the way ONNX Runtime GenAI's phi4mm
// processors hand them to the vision and speech models: so the encoders and the decoder can be
// compared with that pipeline's models on the very same inputs, whatever its preprocessing does.
// Read from `dir` as .npy (float32 or int64), each optional by modality:
//   pixel_values [images, crops, 3, S, S], image_attention_mask [images, crops, P, P] (padded
//   crops are ignored: an image uses 1 + (H/S)·(W/S) of them), image_sizes [images, 2] (H, W);
//   audio_embeds [clips, frames, mel], audio_attention_mask [clips, frames] (valid frames first;
//   absent = all valid), audio_sizes [clips] (placeholder tokens per clip).
// The LoRA mode and the audio projection follow the reference rule from which media are present;
// the ids' placeholder counts must equal the media's tokens.
Result<PreprocessedPrompt> LoadProcessorTensors(const ModelConfig& config, const std::string& dir,
                                                std::vector<int32_t> ids);

}  // namespace phi4mm
