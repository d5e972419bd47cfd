// `phi4mm info` (checkpoint summary) and `phi4mm tokenize` (ids as JSON).
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli_common.h"
#include "server/model_json.h"

namespace phi4mm::cli {

namespace {

std::string Human(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f %s", bytes, units[u]);
  return buf;
}

}  // namespace

int InfoCommand(const ModelFlags& mf, bool as_json) {
  auto model = LoadModel(mf);
  if (!model.ok()) return ReportError(model.status());
  const ModelInfo info = (*model)->Info();
  const ModelConfig& c = (*model)->config();
  const TextConfig& t = c.text;
  const nlohmann::json j = server::ModelJson(**model);
  if (as_json) {
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  const auto weight_bytes = static_cast<double>(j["weight_bytes"].get<uint64_t>());
  const int64_t kv_full = j["kv_cache"]["bytes_at_full_context"].get<int64_t>();
  int64_t total = 0;
  for (const auto& [k, v] : info.params_by_dtype) total += v;
  std::printf("folder:          %s\n", info.dir.c_str());
  std::printf("layout:          %s, %zu safetensors file(s)\n", info.layout.c_str(), info.num_files);
  if (j["prequantized"].is_null())
    std::printf("weights:         %s as published\n", Human(weight_bytes).c_str());
  else
    std::printf("weights:         %s, pre-quantized by phi4mm quantize --quant %s (%lld tensors converted)\n",
                Human(weight_bytes).c_str(), j["prequantized"]["quant"].get<std::string>().c_str(),
                static_cast<long long>(j["prequantized"]["tensors"].get<int64_t>()));
  std::printf("parameters:      %lld total\n", static_cast<long long>(total));
  for (const char* part : {"embedding", "decoder", "vision", "speech", "vision_lora", "speech_lora", "other"})
    std::printf("  %-13s %lld\n", part, static_cast<long long>(j["parameters"][part].get<int64_t>()));
  std::printf("dtypes:         ");
  for (const auto& [k, v] : info.params_by_dtype) std::printf(" %s=%lld", k.c_str(), static_cast<long long>(v));
  std::printf("\ndecoder:         %lld layers, hidden %lld, %lld heads / %lld kv heads x %lld, rotary %lld, vocab %lld\n",
              static_cast<long long>(t.num_hidden_layers), static_cast<long long>(t.hidden_size),
              static_cast<long long>(t.num_attention_heads), static_cast<long long>(t.num_key_value_heads),
              static_cast<long long>(t.head_dim), static_cast<long long>(t.rotary_dim()),
              static_cast<long long>(t.vocab_size));
  std::printf("LoRA:            vision r=%lld alpha=%g, speech r=%lld alpha=%g\n",
              static_cast<long long>(c.vision_lora.rank), c.vision_lora.alpha,
              static_cast<long long>(c.speech_lora.rank), c.speech_lora.alpha);
  std::printf("context:         %lld tokens (LongRoPE switch after %lld)\n", static_cast<long long>(info.context_length),
              static_cast<long long>(t.original_max_position_embeddings));
  std::printf("KV cache (%s):  %s per token, %s at full context\n", info.kv_dtype.c_str(), Human(static_cast<double>(info.kv_bytes_per_token)).c_str(),
              Human(static_cast<double>(kv_full)).c_str());
  std::string avail;
  for (const auto& n : j["kernels"]["available"]) avail += (avail.empty() ? "" : ", ") + n.get<std::string>();
  std::printf("kernels:         %s (this CPU and build offer %s; PHI4MM_ISA picks one)\n",
              j["kernels"]["table"].get<std::string>().c_str(), avail.c_str());
  return 0;
}

namespace {

// Config and tokenizer only: counting and tokenizing never map the weights.
struct TextSide {
  ModelConfig config;
  std::shared_ptr<const Tokenizer> tokenizer;
};

Result<TextSide> LoadTextSide(const std::string& dir) {
  TextSide t;
  PHI4MM_ASSIGN_OR_RETURN(t.config, ModelConfig::LoadFromDir(dir));
  PHI4MM_ASSIGN_OR_RETURN(t.tokenizer, Tokenizer::LoadFromDir(dir));
  return t;
}

}  // namespace

int TokenizeCommand(const ModelFlags& mf, const MediaFlags& mflags, const std::string& text, bool chat) {
  auto side = LoadTextSide(mf.dir);
  if (!side.ok()) return ReportError(side.status());
  auto media = mflags.Load();
  if (!media.ok()) return ReportError(media.status());
  auto rendered = RenderUserPrompt(text, "", !chat, media->images.size(), media->audios.size());
  if (!rendered.ok()) return ReportError(rendered.status());
  std::vector<int32_t> ids;
  auto count = CountPrompt(side->config, *side->tokenizer, *rendered, *media, mflags.ToPromptOptions(), &ids);
  if (!count.ok()) return ReportError(count.status());
  std::printf("%s\n", nlohmann::json(ids).dump().c_str());
  return 0;
}

int CountCommand(const ModelFlags& mf, const MediaFlags& mflags, const std::string& prompt, const std::string& system) {
  auto side = LoadTextSide(mf.dir);
  if (!side.ok()) return ReportError(side.status());
  auto media = mflags.Load();
  if (!media.ok()) return ReportError(media.status());
  auto rendered = RenderUserPrompt(prompt, system, false, media->images.size(), media->audios.size());
  if (!rendered.ok()) return ReportError(rendered.status());
  auto count = CountPrompt(side->config, *side->tokenizer, *rendered, *media, mflags.ToPromptOptions());
  if (!count.ok()) return ReportError(count.status());
  const int64_t ctx = side->config.text.max_position_embeddings;
  nlohmann::json j;
  j["images"] = nlohmann::json::array();
  for (size_t k = 0; k < count->image_tokens.size(); ++k)
    j["images"].push_back({{"file", mflags.images[k]}, {"tokens", count->image_tokens[k]}});
  j["audios"] = nlohmann::json::array();
  for (size_t k = 0; k < count->audio_tokens.size(); ++k)
    j["audios"].push_back({{"file", mflags.audios[k]}, {"tokens", count->audio_tokens[k]}});
  j["text_tokens"] = count->text_tokens;
  j["total_tokens"] = count->total_tokens;
  j["context_length"] = ctx;
  j["fits_context"] = count->total_tokens < ctx;
  std::printf("%s\n", j.dump(2).c_str());
  return 0;
}

}  // namespace phi4mm::cli
