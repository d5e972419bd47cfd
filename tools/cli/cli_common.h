// Shared pieces of the phi4mm subcommands: the sampling/generation flags, model loading with
// user-facing errors, and the tensor dumper behind --dump.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "phi4mm/base/tensor_tap.h"
#include "phi4mm/runtime/chat.h"
#include "phi4mm/runtime/media.h"

namespace phi4mm::cli {

struct GenerationFlags {
  int64_t max_tokens = 512;
  float temperature = 0.0f;
  int top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repeat_penalty = 1.0f;
  uint64_t seed = 0;
  std::vector<std::string> stop;
  std::string json_schema;  // --json-schema FILE: the answer is JSON following it
  bool json = false;        // --json: the answer is a JSON object
  std::string speculative = "none";  // --speculative none|ngram
  int draft_max = 8;                 // --draft-max: drafted ids per verify step, at most
  void Register(CLI::App* app);
  GenerateOptions ToOptions() const;
  // Compiles --json-schema / --json with the model's grammar compiler into opts->constraint.
  Status ApplyOutputFormat(const Model& model, GenerateOptions* opts) const;
};

// --image / --audio / --dynamic-hd, shared by run, count and tokenize.
struct MediaFlags {
  std::vector<std::string> images;
  std::vector<std::string> audios;
  int64_t dynamic_hd = 0;
  void Register(CLI::App* app);
  Result<MediaInputs> Load() const;
  PromptOptions ToPromptOptions() const;
};

// The user turn (optionally after a system turn) rendered with the chat template, with
// placeholders prepended for the media when the prompt has none; `raw` uses the prompt as is.
Result<std::string> RenderUserPrompt(const std::string& prompt, const std::string& system, bool raw,
                                     size_t num_images, size_t num_audios);

struct ModelFlags {
  std::string dir;
  std::string quant = "none";
  std::string kv_dtype = "auto";
  int threads = 0;
  bool verbose = false;
  void Register(CLI::App* app);
};

// `phi4mm bench` flags (tools/cli/cmd_bench.cc).
struct BenchFlags {
  ModelFlags model;
  int64_t prompt_tokens = 512;
  int64_t decode_tokens = 32;
  std::string lora = "all";
  int64_t vision_crops = 1;
  double audio_seconds = 5;
  bool json = false;
  // --concurrency N[,N...]: the batched engine under N concurrent streams (cmd_bench_batch.cc).
  std::string concurrency;
  int64_t prefill_chunk = 128;
  int rounds = 2;
  bool step_profile = false;  // with --concurrency: time the parts of the decode steps
  std::string json_schema;    // with --concurrency: every stream follows this JSON Schema (grammar cost)
  // --long-prompt N: peak RSS of one N-position prompt through the engine (with --concurrency).
  int64_t long_prompt = 0;
  double long_prompt_seconds = 0;
  std::string speculative;  // "ngram": one answer with and without speculative decoding
  std::string speculative_prompts;  // --prompts FILE: instead, a set of user prompts
  int draft_max = 8;
  void Register(CLI::App* app);
};

// `phi4mm export` flags (tools/cli/cmd_export.cc).
struct ExportFlags {
  std::string in_dir, out_dir, precision = "fp32", target = "cpu", lora = "if";
  bool force = false;
  bool allow_unrunnable = false;
  void Register(CLI::App* app);
};

// `phi4mm quantize` flags (tools/cli/cmd_quantize.cc).
struct QuantizeFlags {
  std::string in_dir, out_dir, quant;
  int threads = 0;
  bool force = false;
  void Register(CLI::App* app);
};

// `phi4mm serve` flags (tools/cli/cmd_serve.cc); defaults from the server spec.
struct ServeFlags {
  ModelFlags model;
  std::string host = "127.0.0.1";
  int port = 8080;
  std::vector<std::string> api_keys;
  std::string api_key_file, alias, media_dir;
  int64_t max_running = 8, max_queue = 256, prefill_chunk = 128;
  double kv_budget_gb = 0, kv_swap_gb = -1;
  std::string kv_swap_dir;
  int64_t prefix_cache_mb = 1024, media_cache_mb = 256;
  int64_t max_body_mb = 32, max_media_mb = 20, max_images = 8, max_audios = 4;
  std::string speculative = "none";  // the requests' default (each may choose its own)
  int draft_max = 8;
  int64_t ngram_pool_mb = 16;  // drafts learnt across requests (ngram); 0 = off
  int64_t max_image_pixels = 4096 * 4096, max_audio_seconds = 600;
  int64_t dynamic_hd = 0, max_dynamic_hd = 0, default_max_tokens = 2048;
  double request_timeout = 1800, drain_seconds = 30, sse_ping_seconds = 5;
  int64_t max_connections = 1024, max_connections_per_client = 256, http_workers = 4;
  double header_timeout = 10, body_timeout = 120, idle_timeout = 60;
  int64_t media_budget_mb = 1024;
  bool metrics_public = false;
  bool no_webui = false;
  bool lazy_towers = false;
  void Register(CLI::App* app);
};

// `phi4mm perplexity` flags (tools/cli/cmd_perplexity.cc).
struct PerplexityFlags {
  ModelFlags model;
  std::string text_file, lora = "none", save, reference;
  int64_t context = 512;
  int64_t chunks = 0;
  bool json = false;
  void Register(CLI::App* app);
};

// Prints "phi4mm: error: <message>" to stderr and returns the exit code for it.
int ReportError(const Status& st);
// Loads the model, printing the load time with --verbose.
// --kv-dtype: "auto" (unset: LoadOptions picks by mode) or a KvDType name.
Result<std::optional<KvDType>> ParseKvDTypeFlag(const std::string& s);
Result<std::shared_ptr<const Model>> LoadModel(const ModelFlags& flags);
void PrintTimings(const GenerateResult& r);

// Writes every tapped tensor to DIR/<name>.npy; remembers the first error.
class NpyDumper : public TensorTap {
 public:
  explicit NpyDumper(std::string dir) : dir_(std::move(dir)) {}
  void Tap(const std::string& name, const float* data, const std::vector<int64_t>& shape) override;
  const Status& status() const { return status_; }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  Status status_;
};

// `ids` (comma-separated token ids, used instead of the prompt when not empty) runs those ids as
// they are: no chat template, no media files; `processor_tensors` (a folder, with ids only) gives
// the media as processor tensors (LoadProcessorTensors).
int RunCommand(const ModelFlags& mf, const GenerationFlags& gf, const MediaFlags& media, const std::string& prompt,
               const std::string& system, bool raw, const std::string& dump_dir, const std::string& lora,
               const std::string& ids, const std::string& processor_tensors);
int ChatCommand(const ModelFlags& mf, const GenerationFlags& gf, const MediaFlags& media, const std::string& system);
int InfoCommand(const ModelFlags& mf, bool json);
int TokenizeCommand(const ModelFlags& mf, const MediaFlags& media, const std::string& text, bool chat);
int BenchCommand(const BenchFlags& flags);
int BatchBenchCommand(const BenchFlags& flags);
// `phi4mm bench --speculative ngram` (cmd_bench_speculative.cc).
int SpeculativeBenchCommand(const BenchFlags& flags);
int QuantizeCommand(const QuantizeFlags& flags);
int ServeCommand(const ServeFlags& flags);
int PerplexityCommand(const PerplexityFlags& flags);
int ExportCommand(const ExportFlags& flags);
int CountCommand(const ModelFlags& mf, const MediaFlags& media, const std::string& prompt, const std::string& system);

}  // namespace phi4mm::cli
