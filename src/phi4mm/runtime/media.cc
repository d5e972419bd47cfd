// Prompt preparation: preprocessing, placeholder expansion, budget checks, and the encoders.
#include "phi4mm/runtime/media.h"

#include "phi4mm/runtime/chat.h"

namespace phi4mm {

namespace {

struct Preprocessed {
  std::vector<ProcessedImage> images;
  std::vector<AudioFeatures> audios;
  std::vector<int32_t> image_counts, audio_counts;
};

Result<Preprocessed> Preprocess(const ModelConfig& cfg, const MediaInputs& media, const PromptOptions& opts) {
  if (opts.dynamic_hd < 0) return InvalidArgument("dynamic_hd must be >= 1 (or 0 for the checkpoint's default)");
  ImageProcessorOptions io;
  io.dynamic_hd = opts.dynamic_hd > 0 ? opts.dynamic_hd : cfg.preprocessor.dynamic_hd;
  io.crop_size = cfg.vision.crop_size;
  io.patch_size = cfg.vision.patch_size;
  AudioFeatureOptions ao;
  ao.compression_rate = cfg.preprocessor.audio_compression_rate;
  ao.downsample_rate = cfg.preprocessor.audio_downsample_rate;
  Preprocessed p;
  for (size_t k = 0; k < media.images.size(); ++k) {
    auto r = ProcessImage(media.images[k], io);
    if (!r.ok()) return r.status().WithContext("image " + std::to_string(k + 1));
    p.image_counts.push_back(static_cast<int32_t>(r->num_tokens));
    p.images.push_back(std::move(r).value());
  }
  for (size_t k = 0; k < media.audios.size(); ++k) {
    auto r = ComputeAudioFeatures(media.audios[k], ao);
    if (!r.ok()) return r.status().WithContext("audio " + std::to_string(k + 1));
    p.audio_counts.push_back(static_cast<int32_t>(r->num_tokens));
    p.audios.push_back(std::move(r).value());
  }
  return p;
}

PromptCount MakeCount(const Preprocessed& p, size_t total) {
  PromptCount c;
  c.image_tokens.assign(p.image_counts.begin(), p.image_counts.end());
  c.audio_tokens.assign(p.audio_counts.begin(), p.audio_counts.end());
  c.total_tokens = static_cast<int64_t>(total);
  c.text_tokens = c.total_tokens;
  for (int64_t n : c.image_tokens) c.text_tokens -= n;
  for (int64_t n : c.audio_tokens) c.text_tokens -= n;
  return c;
}

std::string DescribeCount(const PromptCount& c) {
  std::string s = std::to_string(c.text_tokens) + " text";
  for (size_t k = 0; k < c.image_tokens.size(); ++k)
    s += ", image " + std::to_string(k + 1) + ": " + std::to_string(c.image_tokens[k]);
  for (size_t k = 0; k < c.audio_tokens.size(); ++k)
    s += ", audio " + std::to_string(k + 1) + ": " + std::to_string(c.audio_tokens[k]);
  return s;
}

}  // namespace

std::string WithDefaultPlaceholders(std::string_view text, size_t num_images, size_t num_audios) {
  const MediaPlaceholders ph = RewriteMediaPlaceholders(text);
  if (!ph.image_numbers.empty() || !ph.audio_numbers.empty() || (num_images == 0 && num_audios == 0))
    return std::string(text);
  std::string out;
  for (size_t k = 1; k <= num_images; ++k) out += "<|image_" + std::to_string(k) + "|>\n";
  for (size_t k = 1; k <= num_audios; ++k) out += "<|audio_" + std::to_string(k) + "|>\n";
  return out + std::string(text);
}

Result<PromptCount> CountPrompt(const ModelConfig& config, const Tokenizer& tokenizer, std::string_view rendered,
                                const MediaInputs& media, const PromptOptions& opts, std::vector<int32_t>* ids_out) {
  PHI4MM_ASSIGN_OR_RETURN(Preprocessed p, Preprocess(config, media, opts));
  PHI4MM_ASSIGN_OR_RETURN(std::vector<int32_t> ids, EncodePrompt(tokenizer, rendered, p.image_counts, p.audio_counts));
  const PromptCount count = MakeCount(p, ids.size());
  if (ids_out != nullptr) *ids_out = std::move(ids);
  return count;
}

Result<PreprocessedPrompt> PreprocessPrompt(const ModelConfig& config, const Tokenizer& tokenizer,
                                            std::string_view rendered, const MediaInputs& media,
                                            const PromptOptions& opts, int64_t context_length) {
  PHI4MM_ASSIGN_OR_RETURN(Preprocessed p, Preprocess(config, media, opts));
  PreprocessedPrompt out;
  PHI4MM_ASSIGN_OR_RETURN(out.ids, EncodePrompt(tokenizer, rendered, p.image_counts, p.audio_counts));
  out.count = MakeCount(p, out.ids.size());
  const int64_t ctx = context_length > 0 ? context_length : config.text.max_position_embeddings;
  const int64_t budget = opts.token_budget >= 0 ? opts.token_budget : ctx;
  if (out.count.total_tokens > budget) {
    const std::string room = budget == ctx ? "the model's context holds " + std::to_string(ctx)
                                           : "only " + std::to_string(budget) + " of the model's " +
                                                 std::to_string(ctx) + "-token context are left";
    return OutOfRange("the prompt needs " + std::to_string(out.count.total_tokens) + " tokens (" +
                      DescribeCount(out.count) + ") but " + room +
                      "; shorten it, use fewer or smaller images (--dynamic-hd) or shorter audio, or start a new "
                      "conversation");
  }
  const bool has_image = opts.conversation_has_image || !media.images.empty();
  const bool has_audio = opts.conversation_has_audio || !media.audios.empty();
  out.mode = LoraModeForInputs(has_image, has_audio);
  out.audio_with_image = has_image;
  out.dynamic_hd = opts.dynamic_hd > 0 ? opts.dynamic_hd : config.preprocessor.dynamic_hd;
  out.images = std::move(p.images);
  out.audios = std::move(p.audios);
  return out;
}

Result<PreparedPrompt> PreparePrompt(const Model& model, std::string_view rendered, const MediaInputs& media,
                                     const PromptOptions& opts, TensorTap* tap) {
  PHI4MM_ASSIGN_OR_RETURN(PreprocessedPrompt p, PreprocessPrompt(model.config(), model.tokenizer(), rendered, media,
                                                                 opts, model.context_length()));
  PreparedPrompt out;
  out.ids = std::move(p.ids);
  out.count = p.count;
  out.mode = p.mode;
  const bool has_image = p.audio_with_image;
  if (!p.images.empty()) {
    PHI4MM_ASSIGN_OR_RETURN(const VisionModel* vision, model.vision());
    for (size_t k = 0; k < p.images.size(); ++k) {
      const std::string prefix = "image." + std::to_string(k) + ".";
      if (tap != nullptr) {  // the processor's tensors, as the ONNX vision model takes them
        const ProcessedImage& im = p.images[k];
        const int64_t S = im.crop_size, P = im.patches_per_side;
        const std::vector<float> mask(im.attention_mask.begin(), im.attention_mask.end());
        const float sizes[2] = {static_cast<float>(im.hd_height), static_cast<float>(im.hd_width)};
        tap->Tap(prefix + "pixel_values", im.pixel_values.data(), {im.num_crops, 3, S, S});
        tap->Tap(prefix + "image_attention_mask", mask.data(), {im.num_crops, P, P});
        tap->Tap(prefix + "image_sizes", sizes, {2});
      }
      auto f = vision->Encode(p.images[k], model.pool(), tap, prefix);
      if (!f.ok()) return f.status().WithContext("image " + std::to_string(k + 1));
      out.features.image.insert(out.features.image.end(), f->begin(), f->end());
    }
  }
  if (!p.audios.empty()) {
    PHI4MM_ASSIGN_OR_RETURN(const SpeechModel* speech, model.speech());
    for (size_t k = 0; k < p.audios.size(); ++k) {
      if (tap != nullptr) {  // the processor's log-mel, as the ONNX speech model takes it
        const AudioFeatures& af = p.audios[k];
        const float tokens = static_cast<float>(af.num_tokens);
        tap->Tap("audio." + std::to_string(k) + ".audio_embeds", af.log_mel.data(), {af.frames, af.num_mel});
        tap->Tap("audio." + std::to_string(k) + ".audio_sizes", &tokens, {1});
      }
      auto f = speech->Encode(p.audios[k], has_image, model.pool(), tap, "audio." + std::to_string(k) + ".");
      if (!f.ok()) return f.status().WithContext("audio " + std::to_string(k + 1));
      out.features.audio.insert(out.features.audio.end(), f->begin(), f->end());
    }
  }
  return out;
}

}  // namespace phi4mm
