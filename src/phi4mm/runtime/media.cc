// Prompt preparation: preprocessing, placeholder expansion, budget checks, and the encoders.
#include "phi4mm/runtime/media.h"

#include <algorithm>
#include <filesystem>

#include "phi4mm/base/file_map.h"
#include "phi4mm/io/npy.h"
#include "phi4mm/runtime/chat.h"
#include "phi4mm/tokenizer/chat_format.h"

namespace phi4mm {

namespace {

struct Preprocessed {
  std::vector<ProcessedImage> images;
  std::vector<AudioFeatures> audios;
  std::vector<int32_t> image_counts, audio_counts;
};

// `pixels` false: the images are only counted (PlanImage, from their size), not processed.
Result<Preprocessed> Preprocess(const ModelConfig& cfg, const MediaInputs& media, const PromptOptions& opts,
                                bool pixels = true) {
  if (opts.dynamic_hd < 0) return InvalidArgument("dynamic_hd must be >= 1 (or 0 for the checkpoint's default)");
  ImageProcessorOptions io;
  io.dynamic_hd = opts.dynamic_hd > 0 ? opts.dynamic_hd : cfg.preprocessor.dynamic_hd;
  io.crop_size = cfg.vision.crop_size;
  io.patch_size = cfg.vision.patch_size;
  AudioFeatureOptions ao;
  ao.compression_rate = cfg.preprocessor.audio_compression_rate;
  ao.downsample_rate = cfg.preprocessor.audio_downsample_rate;
  Preprocessed p;
  auto cancelled = [&] { return opts.cancel != nullptr && opts.cancel->load(std::memory_order_relaxed); };
  for (size_t k = 0; k < media.images.size(); ++k) {
    if (cancelled()) return Cancelled("preprocessing was cancelled");
    if (!pixels) {
      auto plan = PlanImage(media.images[k].width, media.images[k].height, io);
      if (!plan.ok()) return plan.status().WithContext("image " + std::to_string(k + 1));
      p.image_counts.push_back(static_cast<int32_t>(plan->num_tokens));
      continue;
    }
    auto r = ProcessImage(media.images[k], io);
    if (!r.ok()) return r.status().WithContext("image " + std::to_string(k + 1));
    p.image_counts.push_back(static_cast<int32_t>(r->num_tokens));
    p.images.push_back(std::move(r).value());
  }
  for (size_t k = 0; k < media.audios.size(); ++k) {
    if (cancelled()) return Cancelled("preprocessing was cancelled");
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
  PHI4MM_ASSIGN_OR_RETURN(Preprocessed p, Preprocess(config, media, opts, /*pixels=*/false));
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
  const int64_t ctx = context_length > 0 ? context_length : config.text.max_position_embeddings;
  const int64_t budget = opts.token_budget >= 0 ? opts.token_budget : ctx;
  // The text alone may not need more than the budget (its placeholders are one token each before
  // expansion): a longer one is refused without encoding all of it.
  EncodeLimits limits;
  limits.max_tokens = budget;
  limits.cancel = opts.cancel;
  auto ids = EncodePrompt(tokenizer, rendered, p.image_counts, p.audio_counts, limits);
  if (!ids.ok() && ids.status().code() == StatusCode::kOutOfRange)
    return OutOfRange("the prompt's text needs more than " + std::to_string(budget) + " tokens but " +
                      (budget == ctx ? "the model's context holds " + std::to_string(ctx)
                                     : "only " + std::to_string(budget) + " tokens are left") +
                      "; shorten it or start a new conversation");
  if (!ids.ok()) return ids.status();
  out.ids = std::move(ids).value();
  out.count = MakeCount(p, out.ids.size());
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
  return EncodeMedia(model, std::move(p), tap);
}

Result<PreparedPrompt> EncodeMedia(const Model& model, PreprocessedPrompt p, TensorTap* tap) {
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

namespace {

// An optional .npy of `dir`: absent -> an empty array.
Result<NpyArray> ReadOptionalNpy(const std::string& dir, const std::string& name) {
  const std::string path = JoinPath(dir, name + ".npy");
  if (!FileExists(path)) return NpyArray{};
  auto a = ReadNpy(path);
  if (!a.ok()) return a.status().WithContext("processor tensor '" + name + "'");
  return a;
}

// The values of `a` as doubles, whatever its dtype.
std::vector<double> Values(const NpyArray& a) {
  if (!a.i64.empty()) return std::vector<double>(a.i64.begin(), a.i64.end());
  return std::vector<double>(a.f32.begin(), a.f32.end());
}

Status WantShape(const NpyArray& a, const std::string& name, const std::vector<int64_t>& want) {
  bool ok = a.shape.size() == want.size();
  for (size_t i = 0; ok && i < want.size(); ++i) ok = want[i] < 0 || a.shape[i] == want[i];
  if (ok) return Status::Ok();
  auto dims = [](const std::vector<int64_t>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + (v[i] < 0 ? std::string("*") : std::to_string(v[i]));
    return s + "]";
  };
  return InvalidArgument("processor tensor '" + name + "' has shape " + dims(a.shape) + ", expected " + dims(want));
}

}  // namespace

Result<PreprocessedPrompt> LoadProcessorTensors(const ModelConfig& config, const std::string& dir,
                                                std::vector<int32_t> ids) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    return NotFound("processor tensors folder '" + dir + "' does not exist or is not a folder");
  const int64_t S = config.vision.crop_size, P = S / config.vision.patch_size, mel = config.audio.input_size;
  PHI4MM_ASSIGN_OR_RETURN(NpyArray pv, ReadOptionalNpy(dir, "pixel_values"));
  PHI4MM_ASSIGN_OR_RETURN(NpyArray mask, ReadOptionalNpy(dir, "image_attention_mask"));
  PHI4MM_ASSIGN_OR_RETURN(NpyArray sizes, ReadOptionalNpy(dir, "image_sizes"));
  PHI4MM_ASSIGN_OR_RETURN(NpyArray ae, ReadOptionalNpy(dir, "audio_embeds"));
  PHI4MM_ASSIGN_OR_RETURN(NpyArray amask, ReadOptionalNpy(dir, "audio_attention_mask"));
  PHI4MM_ASSIGN_OR_RETURN(NpyArray asizes, ReadOptionalNpy(dir, "audio_sizes"));
  PreprocessedPrompt out;
  out.ids = std::move(ids);
  if (!pv.shape.empty()) {
    PHI4MM_RETURN_IF_ERROR(WantShape(pv, "pixel_values", {-1, -1, 3, S, S}));
    if (pv.f32.empty()) return InvalidArgument("processor tensor 'pixel_values' must be float32");
    const int64_t n = pv.shape[0], crops = pv.shape[1];
    PHI4MM_RETURN_IF_ERROR(WantShape(mask, "image_attention_mask", {n, crops, P, P}));
    PHI4MM_RETURN_IF_ERROR(WantShape(sizes, "image_sizes", {n, 2}));
    const std::vector<double> m = Values(mask), hw = Values(sizes);
    for (int64_t k = 0; k < n; ++k) {
      ProcessedImage im;
      im.crop_size = S;
      im.patches_per_side = P;
      im.hd_height = static_cast<int64_t>(hw[static_cast<size_t>(2 * k)]);
      im.hd_width = static_cast<int64_t>(hw[static_cast<size_t>(2 * k + 1)]);
      if (im.hd_height <= 0 || im.hd_width <= 0 || im.hd_height % S != 0 || im.hd_width % S != 0)
        return InvalidArgument("image_sizes[" + std::to_string(k) + "] = " + std::to_string(im.hd_height) + "x" +
                               std::to_string(im.hd_width) + " is not a positive multiple of the crop size " +
                               std::to_string(S));
      im.num_crops = 1 + (im.hd_height / S) * (im.hd_width / S);
      if (im.num_crops > crops)
        return InvalidArgument("image " + std::to_string(k + 1) + " of " + std::to_string(im.hd_height) + "x" +
                               std::to_string(im.hd_width) + " needs " + std::to_string(im.num_crops) +
                               " crops but pixel_values holds " + std::to_string(crops));
      const size_t crop_px = static_cast<size_t>(3 * S * S), crop_mask = static_cast<size_t>(P * P);
      const auto px0 = pv.f32.begin() + static_cast<ptrdiff_t>(static_cast<size_t>(k * crops) * crop_px);
      im.pixel_values.assign(px0, px0 + static_cast<ptrdiff_t>(static_cast<size_t>(im.num_crops) * crop_px));
      const size_t m0 = static_cast<size_t>(k * crops) * crop_mask;
      im.attention_mask.resize(static_cast<size_t>(im.num_crops) * crop_mask);
      for (size_t i = 0; i < im.attention_mask.size(); ++i) im.attention_mask[i] = m[m0 + i] != 0.0 ? 1 : 0;
      im.num_tokens = CountImageTokens(im);
      out.count.image_tokens.push_back(im.num_tokens);
      out.images.push_back(std::move(im));
    }
  } else if (!mask.shape.empty() || !sizes.shape.empty()) {
    return InvalidArgument("image_attention_mask / image_sizes were given without pixel_values");
  }
  if (!ae.shape.empty()) {
    PHI4MM_RETURN_IF_ERROR(WantShape(ae, "audio_embeds", {-1, -1, mel}));
    if (ae.f32.empty()) return InvalidArgument("processor tensor 'audio_embeds' must be float32");
    const int64_t n = ae.shape[0], frames = ae.shape[1];
    PHI4MM_RETURN_IF_ERROR(WantShape(asizes, "audio_sizes", {n}));
    if (!amask.shape.empty()) PHI4MM_RETURN_IF_ERROR(WantShape(amask, "audio_attention_mask", {n, frames}));
    const std::vector<double> am = Values(amask), as = Values(asizes);
    for (int64_t k = 0; k < n; ++k) {
      AudioFeatures af;
      af.num_mel = mel;
      af.frames = frames;
      if (!am.empty()) {
        const auto row = am.begin() + static_cast<ptrdiff_t>(k * frames);
        af.frames = std::count_if(row, row + frames, [](double v) { return v != 0.0; });
      }
      af.num_tokens = static_cast<int64_t>(as[static_cast<size_t>(k)]);
      const auto x0 = ae.f32.begin() + static_cast<ptrdiff_t>(k * frames * mel);
      af.log_mel.assign(x0, x0 + static_cast<ptrdiff_t>(af.frames * mel));
      out.count.audio_tokens.push_back(af.num_tokens);
      out.audios.push_back(std::move(af));
    }
  } else if (!amask.shape.empty() || !asizes.shape.empty()) {
    return InvalidArgument("audio_attention_mask / audio_sizes were given without audio_embeds");
  }
  int64_t image_rows = 0, audio_rows = 0;
  for (int64_t t : out.count.image_tokens) image_rows += t;
  for (int64_t t : out.count.audio_tokens) audio_rows += t;
  const int64_t image_ids = std::count(out.ids.begin(), out.ids.end(), kImageTokenId);
  const int64_t audio_ids = std::count(out.ids.begin(), out.ids.end(), kAudioTokenId);
  if (image_ids != image_rows || audio_ids != audio_rows)
    return InvalidArgument("the ids hold " + std::to_string(image_ids) + " image and " + std::to_string(audio_ids) +
                           " audio placeholders, but the processor tensors make " + std::to_string(image_rows) +
                           " image and " + std::to_string(audio_rows) + " audio tokens");
  out.count.total_tokens = static_cast<int64_t>(out.ids.size());
  out.count.text_tokens = out.count.total_tokens - image_rows - audio_rows;
  out.mode = LoraModeForInputs(!out.images.empty(), !out.audios.empty());
  out.audio_with_image = !out.images.empty();
  return out;
}

}  // namespace phi4mm
