// Flag registration, model loading and error reporting shared by the subcommands.
#include "cli_common.h"

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "phi4mm/base/file_map.h"
#include "phi4mm/io/npy.h"

namespace phi4mm::cli {

void GenerationFlags::Register(CLI::App* app) {
  app->add_option("-n,--max-tokens", max_tokens, "Maximum number of new tokens")->capture_default_str();
  app->add_option("--temperature", temperature, "Sampling temperature; 0 = greedy")->capture_default_str();
  app->add_option("--top-k", top_k, "Keep the k most likely tokens; 0 = off")->capture_default_str();
  app->add_option("--top-p", top_p, "Nucleus sampling mass; 1 = off")->capture_default_str();
  app->add_option("--min-p", min_p, "Drop tokens below min-p times the top probability; 0 = off")->capture_default_str();
  app->add_option("--repeat-penalty", repeat_penalty, "Repetition penalty; 1 = off")->capture_default_str();
  app->add_option("--seed", seed, "Random seed for sampling")->capture_default_str();
  app->add_option("--stop", stop, "Stop when this string is generated (repeatable)");
  auto* schema = app->add_option("--json-schema", json_schema,
                                 "Answer with JSON that validates against this JSON Schema file (strict: objects hold "
                                 "only the listed properties unless additionalProperties says more)");
  app->add_flag("--json", json, "Answer with a JSON object")->excludes(schema);
  app->add_option("--speculative", speculative,
                  "none, or ngram: draft the next tokens from earlier text (prompt and answer) and verify them in "
                  "one step; the answer is the same, faster when it copies from its context")
      ->check(CLI::IsMember({"none", "ngram"}))
      ->capture_default_str();
  app->add_option("--draft-max", draft_max, "With --speculative ngram: drafted tokens per step, at most")
      ->check(CLI::Range(1, kMaxDraft))
      ->capture_default_str();
}

Status GenerationFlags::ApplyOutputFormat(const Model& model, GenerateOptions* opts) const {
  if (json_schema.empty() && !json) return Status::Ok();
  auto compiler = model.grammar();
  if (!compiler.ok()) return compiler.status();
  Result<std::shared_ptr<const grammar::CompiledGrammar>> g = (*compiler)->JsonObject();
  if (!json_schema.empty()) {
    auto text = ReadFileToString(json_schema);
    if (!text.ok()) return text.status().WithContext("--json-schema");
    g = (*compiler)->JsonSchema(*text, /*strict=*/true);
    if (!g.ok()) return g.status().WithContext("--json-schema " + json_schema);
  }
  if (!g.ok()) return g.status();
  opts->constraint.grammar = std::move(g).value();
  return Status::Ok();
}

GenerateOptions GenerationFlags::ToOptions() const {
  GenerateOptions o;
  o.max_new_tokens = max_tokens;
  o.sampling.temperature = temperature;
  o.sampling.top_k = top_k;
  o.sampling.top_p = top_p;
  o.sampling.min_p = min_p;
  o.sampling.repetition_penalty = repeat_penalty;
  o.sampling.seed = seed;
  o.stop_strings = stop;
  o.speculative.mode = ParseSpeculativeMode(speculative).value_or(SpeculativeMode::kNone);
  o.speculative.max_draft = draft_max;
  return o;
}

void MediaFlags::Register(CLI::App* app) {
  app->add_option("--image", images, "An image file (JPEG, PNG, BMP, GIF, PPM/PGM, WebP); repeatable");
  app->add_option("--audio", audios, "An audio file (WAV, FLAC, OGG, MP3); repeatable");
  app->add_option("--dynamic-hd", dynamic_hd,
                  "Maximum 448x448 crops per image (the checkpoint's preprocessor_config.json by default; "
                  "each crop costs ~272 prompt tokens)");
}

Result<MediaInputs> MediaFlags::Load() const {
  MediaInputs m;
  for (const std::string& path : images) {
    auto img = DecodeImageFile(path);
    if (!img.ok()) return img.status().WithContext("--image " + path);
    m.images.push_back(std::move(img).value());
  }
  for (const std::string& path : audios) {
    auto clip = DecodeAudioFile(path);
    if (!clip.ok()) return clip.status().WithContext("--audio " + path);
    m.audios.push_back(std::move(clip).value());
  }
  return m;
}

PromptOptions MediaFlags::ToPromptOptions() const {
  PromptOptions o;
  o.dynamic_hd = dynamic_hd;
  return o;
}

Result<std::string> RenderUserPrompt(const std::string& prompt, const std::string& system, bool raw,
                                     size_t num_images, size_t num_audios) {
  if (raw) return prompt;
  std::vector<ChatMessage> msgs;
  if (!system.empty()) msgs.push_back({"system", system, std::nullopt});
  msgs.push_back({"user", WithDefaultPlaceholders(prompt, num_images, num_audios), std::nullopt});
  return RenderChatPrompt(msgs, true);
}

void ModelFlags::Register(CLI::App* app) {
  app->add_option("-m,--model", dir, "Checkpoint folder (Hugging Face layout)")->required();
  app->add_option("-t,--threads", threads, "Worker threads; 0 = one per core")->capture_default_str();
  app->add_option("--quant", quant,
                  "Decoder weight format, converted at load: none (as stored; a folder written by "
                  "`phi4mm quantize` runs in its mode), bf16, q8 (8-bit blocks), q4 (4-bit blocks with an "
                  "8-bit embedding/lm_head), q4m (q4 with qkv and half the layers' down projection at 8 bits: "
                  "less loss, ~17% more bytes)")
      ->capture_default_str();
  app->add_option("--kv-dtype", kv_dtype,
                  "KV-cache element type: auto (f32 with --quant none on a float checkpoint, else f16), "
                  "f32 (exact), f16 (half the memory), q8 (int8 rows with a scale, a quarter; ~1-4% logit "
                  "error)")
      ->capture_default_str();
  app->add_flag("-v,--verbose", verbose, "Print load and generation timings to stderr");
}

int ReportError(const Status& st) {
  std::fprintf(stderr, "phi4mm: error: %s\n", st.ToString().c_str());
  return 1;
}

Result<std::optional<KvDType>> ParseKvDTypeFlag(const std::string& s) {
  if (s == "auto") return std::optional<KvDType>();
  const std::optional<KvDType> kv = ParseKvDType(s);
  if (!kv) return InvalidArgument("--kv-dtype must be auto, f32, f16 or q8, got '" + s + "'");
  return kv;
}

Result<std::shared_ptr<const Model>> LoadModel(const ModelFlags& flags) {
  const auto t0 = std::chrono::steady_clock::now();
  LoadOptions opts;
  opts.num_threads = flags.threads;
  const std::optional<QuantMode> quant = ParseQuantMode(flags.quant);
  if (!quant) return InvalidArgument("--quant must be none, bf16, q8, q4 or q4m, got '" + flags.quant + "'");
  opts.quant = *quant;
  PHI4MM_ASSIGN_OR_RETURN(opts.kv_dtype, ParseKvDTypeFlag(flags.kv_dtype));
  auto m = Model::Load(flags.dir, opts);
  if (m.ok() && flags.verbose) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::string& pre = (*m)->checkpoint().prequantized();
    const std::string weights = pre.empty() ? QuantModeName(opts.quant) : pre + ", pre-quantized";
    std::fprintf(stderr, "[phi4mm] loaded %s (%s, decoder weights: %s) in %.2f s, %d threads\n", flags.dir.c_str(),
                 LayoutName((*m)->config().layout), weights.c_str(), s, (*m)->pool()->num_threads());
  }
  return m;
}

void PrintTimings(const GenerateResult& r) {
  const double pre = r.prefill_seconds, dec = r.decode_seconds;
  std::fprintf(stderr, "[phi4mm] prompt %lld tokens in %.3f s (%.2f tok/s); generated %zu tokens, %lld decode steps in %.3f s (%.2f tok/s); finish: %s\n",
               static_cast<long long>(r.prompt_tokens), pre, pre > 0 ? r.prompt_tokens / pre : 0.0, r.tokens.size(),
               static_cast<long long>(r.decode_steps), dec,
               dec > 0 && !r.tokens.empty() ? static_cast<double>(r.tokens.size() - 1) / dec : 0.0,
               FinishReasonName(r.finish));
  if (r.draft_tokens > 0)
    std::fprintf(stderr, "[phi4mm] speculative: %lld of %lld drafted tokens accepted; %.2f tokens per decode step\n",
                 static_cast<long long>(r.accepted_draft_tokens), static_cast<long long>(r.draft_tokens),
                 r.decode_steps > 0 ? static_cast<double>(r.tokens.size() - 1) / r.decode_steps : 0.0);
}

void NpyDumper::Tap(const std::string& name, const float* data, const std::vector<int64_t>& shape) {
  if (!status_.ok()) return;
  status_ = WriteNpyF32((std::filesystem::path(dir_) / (name + ".npy")).string(), data, shape);
}

}  // namespace phi4mm::cli
