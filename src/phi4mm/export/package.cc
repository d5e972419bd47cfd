// ExportPackage and the package's JSON files (genai_config.json keys as ORT GenAI's config parser
// reads them for type phi4mm, where an unknown key is an error; processor JSONs in the
// onnxruntime-extensions schema of Microsoft's package, shared/docs/ort-genai-package.md §6).
#include "phi4mm/export/package.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "phi4mm/base/file_map.h"
#include "phi4mm/export/embedding_model.h"
#include "phi4mm/export/speech_model.h"
#include "phi4mm/export/text_model.h"
#include "phi4mm/export/vision_model.h"

namespace phi4mm::exporter {

namespace {

using nlohmann::json;

Status WriteText(const std::string& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return InvalidArgument("cannot create '" + path + "'");
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok) return DataLoss("writing '" + path + "' failed (disk full?)");
  return Status::Ok();
}

}  // namespace

std::string GenaiConfigJson(const ModelConfig& cfg, int64_t kv_layers, const ExportOptions& opts) {
  const TextConfig& t = cfg.text;
  json providers = json::array();
  if (opts.target == "cuda") providers.push_back({{"cuda", json::object()}});
  json decoder = {
      {"session_options", {{"log_id", "onnxruntime-genai"}, {"provider_options", providers}}},
      {"filename", kTextFile},
      {"head_size", t.head_dim},
      {"hidden_size", t.hidden_size},
      {"num_attention_heads", t.num_attention_heads},
      {"num_hidden_layers", kv_layers},
      {"num_key_value_heads", t.num_key_value_heads},
      {"inputs",
       {{"inputs_embeds", kInputsEmbeds},
        {"attention_mask", kAttentionMask},
        {"past_key_names", "past_key_values.%d.key"},
        {"past_value_names", "past_key_values.%d.value"}}},
      {"outputs",
       {{"logits", kLogits}, {"present_key_names", "present.%d.key"}, {"present_value_names", "present.%d.value"}}}};
  if (kv_layers > t.num_hidden_layers) decoder["inputs"]["input_ids"] = kInputIds;  // the LoRA gates read it
  json model = {
      {"bos_token_id", cfg.generation.bos_token_id},
      {"eos_token_id", cfg.generation.eos_token_ids},
      {"pad_token_id", cfg.generation.pad_token_id},
      {"context_length", t.max_position_embeddings},
      {"vocab_size", t.vocab_size},
      {"type", "phi4mm"},
      {"decoder", decoder},
      {"embedding",
       {{"filename", kEmbeddingFile},
        {"inputs", {{"input_ids", kInputIds}, {"image_features", kImageFeatures}, {"audio_features", kAudioFeatures}}},
        {"outputs", {{"inputs_embeds", kInputsEmbeds}}}}},
      {"vision",
       {{"filename", kVisionFile},
        {"config_filename", "vision_processor.json"},
        {"inputs",
         {{"pixel_values", "pixel_values"}, {"attention_mask", "image_attention_mask"}, {"image_sizes", "image_sizes"}}},
        {"outputs", {{"image_features", kImageFeatures}}}}},
      {"speech",
       {{"filename", kSpeechFile},
        {"config_filename", "speech_processor.json"},
        {"inputs",
         {{"audio_embeds", "audio_embeds"},
          {"attention_mask", "audio_attention_mask"},
          {"audio_sizes", "audio_sizes"},
          {"audio_projection_mode", "audio_projection_mode"}}},
        {"outputs", {{"audio_features", kAudioFeatures}}}}}};
  json search = {{"diversity_penalty", 0.0},
                 {"do_sample", false},
                 {"early_stopping", true},
                 {"length_penalty", 1.0},
                 {"max_length", t.max_position_embeddings},
                 {"min_length", 0},
                 {"no_repeat_ngram_size", 0},
                 {"num_beams", 1},
                 {"num_return_sequences", 1},
                 {"past_present_share_buffer", opts.target == "cuda"},
                 {"repetition_penalty", 1.0},
                 {"temperature", 1.0},
                 {"top_k", 1},
                 {"top_p", 1.0}};
  return json({{"model", model}, {"search", search}}).dump(2) + "\n";
}

std::string VisionProcessorJson(const ModelConfig& cfg) {
  auto op = [](const char* name, const char* type, json attrs, json inputs = nullptr) {
    json o = {{"name", name}, {"type", type}};
    if (!attrs.is_null()) o["attrs"] = std::move(attrs);
    if (!inputs.is_null()) o["inputs"] = std::move(inputs);
    return json{{"operation", o}};
  };
  const int64_t base = cfg.vision.crop_size;
  json transforms = json::array(
      {op("decode_image", "DecodeImage", {{"color_space", "RGB"}}),
       op("phi4_vision_dynamic_preprocess", "Phi4VisionDynamicPreprocess",
          {{"dynamic_hd", cfg.preprocessor.dynamic_hd}, {"dyhd_base_resolution", base}}),
       op("rescale", "Rescale", nullptr, json::array({":0"})),
       op("normalize", "Normalize", {{"mean", {0.5, 0.5, 0.5}}, {"std", {0.5, 0.5, 0.5}}}),
       op("phi4_vision_processor", "Phi4VisionProcessor", {{"dyhd_base_resolution", base}, {"interpolation", "CUBIC"}},
          json::array({":0", "phi4_vision_dynamic_preprocess:1"}))});
  return json({{"processor",
                {{"name", "phi_4_vision_processor"}, {"transforms", transforms}, {"output_aligner", "phi4-vision-aligner"}}}})
             .dump(2) +
         "\n";
}

std::string SpeechProcessorJson(const ModelConfig& cfg) {
  json embed = {{"audio_compression_rate", cfg.preprocessor.audio_compression_rate},
                {"stft_normal/n_fft", 512},     {"stft_normal/frame_length", 400},
                {"stft_normal/hop_length", 160}, {"stft_normal/win_fn", "hamming"},
                {"logmel/chunk_size", 30},      {"logmel/hop_length", 160},
                {"logmel/n_fft", 512},          {"logmel/n_mel", 80},
                {"logmel/feature_first", 0},    {"logmel/no_padding", 1},
                {"stft_normal_8k/n_fft", 256},  {"stft_normal_8k/frame_length", 200},
                {"stft_normal_8k/hop_length", 80}, {"stft_normal_8k/win_fn", "hamming"},
                {"logmel_8k/chunk_size", 30},   {"logmel_8k/hop_length", 80},
                {"logmel_8k/n_fft", 512},       {"logmel_8k/n_mel", 80},
                {"logmel_8k/feature_first", 0}, {"logmel_8k/no_padding", 1}};
  // "max_samples": 0 lifts AudioDecoderEx's default cut at 480000 samples (30 s at 16 kHz).
  json seq = json::array(
      {{{"operation",
         {{"name", "audio_decoder"},
          {"type", "AudioDecoderEx"},
          {"attrs", {{"target_sample_rates", {8000, 16000}}, {"max_samples", 0}}}}}},
       {{"operation", {{"name", "phi_4_audio_embed"}, {"type", "Phi4AudioEmbed"}, {"attrs", embed}}}}});
  return json({{"feature_extraction", {{"sequence", seq}, {"output_aligner", "phi4-audio-aligner"}}}}).dump(2) + "\n";
}

Result<PackageSummary> ExportPackage(const std::string& model_dir, const std::string& out_dir,
                                     const ExportOptions& opts) {
  PHI4MM_RETURN_IF_ERROR(opts.Validate());
  PHI4MM_ASSIGN_OR_RETURN(ModelConfig cfg, ModelConfig::LoadFromDir(model_dir));
  if (opts.require_runnable) PHI4MM_RETURN_IF_ERROR(RunnableByOrt(cfg));
  PHI4MM_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::Open(model_dir, cfg.layout));
  if (!ckpt.prequantized().empty())
    return InvalidArgument("'" + model_dir + "' was written by `phi4mm quantize --quant " + ckpt.prequantized() +
                           "`; export from the original checkpoint");
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return InvalidArgument("cannot create output folder '" + out_dir + "': " + ec.message());
  PackageSummary s;
  PHI4MM_ASSIGN_OR_RETURN(TextModelInfo text, WriteTextModel(ckpt, cfg, out_dir, opts));
  s.kv_layers = text.kv_layers;
  s.lora_register = text.kv_layers > cfg.text.num_hidden_layers;
  s.external_bytes += text.external_bytes;
  s.files.push_back(kTextFile);
  s.files.push_back(std::string(kTextFile) + ".data");
  PHI4MM_ASSIGN_OR_RETURN(uint64_t emb_bytes, WriteEmbeddingModel(ckpt, cfg, out_dir, opts));
  s.external_bytes += emb_bytes;
  s.files.push_back(kEmbeddingFile);
  s.files.push_back(std::string(kEmbeddingFile) + ".data");
  PHI4MM_ASSIGN_OR_RETURN(uint64_t vision_bytes, WriteVisionModel(ckpt, cfg, out_dir, opts));
  s.external_bytes += vision_bytes;
  s.files.push_back(kVisionFile);
  s.files.push_back(std::string(kVisionFile) + ".data");
  PHI4MM_ASSIGN_OR_RETURN(uint64_t speech_bytes, WriteSpeechModel(ckpt, cfg, out_dir, opts));
  s.external_bytes += speech_bytes;
  s.files.push_back(kSpeechFile);
  s.files.push_back(std::string(kSpeechFile) + ".data");
  const std::pair<const char*, std::string> jsons[] = {{"genai_config.json", GenaiConfigJson(cfg, text.kv_layers, opts)},
                                                       {"vision_processor.json", VisionProcessorJson(cfg)},
                                                       {"speech_processor.json", SpeechProcessorJson(cfg)}};
  for (const auto& [name, text_json] : jsons) {
    PHI4MM_RETURN_IF_ERROR(WriteText(JoinPath(out_dir, name), text_json));
    s.files.push_back(name);
  }
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json"}) {
    const std::string from = JoinPath(model_dir, name);
    if (!FileExists(from)) continue;
    std::filesystem::copy_file(from, JoinPath(out_dir, name), std::filesystem::copy_options::overwrite_existing, ec);
    if (ec) return DataLoss("copying '" + from + "' to '" + out_dir + "': " + ec.message());
    s.files.push_back(name);
  }
  return s;
}

}  // namespace phi4mm::exporter
