// `phi4mm quantize`: loads a checkpoint with the weights converted as `--quant` converts them at
// load (every part: decoder, embedding / lm_head, LoRA adapters, vision and speech), records each
// conversion, and writes a pre-quantized copy of the folder that later starts map without
// converting (io/prequantized.h, docs/design.md "Pre-quantized checkpoints").
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "cli_common.h"
#include "phi4mm/io/prequantized.h"

namespace phi4mm::cli {

namespace {

double GiB(uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0); }

}  // namespace

void QuantizeFlags::Register(CLI::App* app) {
  app->add_option("-m,--model", in_dir, "Checkpoint folder to read (Hugging Face layout)")->required();
  app->add_option("-o,--output", out_dir, "Folder to write the pre-quantized checkpoint to")->required();
  app->add_option("--quant", quant, "Weight format to store: bf16, q8 (8-bit blocks), q4 (4-bit blocks with an "
                                    "8-bit embedding/lm_head), q4m (q4 with qkv and half the layers' down "
                                    "projection at 8 bits), as `run --quant` converts at load")
      ->required();
  app->add_option("-t,--threads", threads, "Worker threads; 0 = one per core")->capture_default_str();
  app->add_flag("--force", force, "Write into a non-empty output folder (its files are overwritten)");
}

int QuantizeCommand(const QuantizeFlags& f) {
  using Clock = std::chrono::steady_clock;
  const std::optional<QuantMode> quant = ParseQuantMode(f.quant);
  if (!quant) return ReportError(InvalidArgument("--quant must be bf16, q8, q4 or q4m, got '" + f.quant + "'"));
  if (*quant == QuantMode::kNone)
    return ReportError(InvalidArgument("--quant none stores nothing converted; choose bf16, q8, q4 or q4m"));
  std::error_code ec;
  namespace fs = std::filesystem;
  if (fs::exists(f.out_dir, ec)) {
    if (!fs::is_directory(f.out_dir, ec))
      return ReportError(InvalidArgument("output '" + f.out_dir + "' exists and is not a folder"));
    if (!fs::is_empty(f.out_dir, ec) && !f.force)
      return ReportError(InvalidArgument("output folder '" + f.out_dir +
                                         "' is not empty; choose another one or pass --force to overwrite its files"));
  }
  const auto t0 = Clock::now();
  ConversionLog log;
  LoadOptions opts;
  opts.num_threads = f.threads;
  opts.quant = *quant;
  opts.conversion_log = &log;
  auto model = Model::Load(f.in_dir, opts);
  if (!model.ok()) return ReportError(model.status());
  auto vision = (*model)->vision();
  if (!vision.ok()) return ReportError(vision.status());
  auto speech = (*model)->speech();
  if (!speech.ok()) return ReportError(speech.status());
  const double convert_s = std::chrono::duration<double>(Clock::now() - t0).count();
  const auto t1 = Clock::now();
  auto stats = WritePrequantizedCheckpoint((*model)->checkpoint(), log, QuantModeName(*quant), f.out_dir);
  if (!stats.ok()) return ReportError(stats.status().WithContext("writing '" + f.out_dir + "'"));
  const double write_s = std::chrono::duration<double>(Clock::now() - t1).count();
  std::printf("quantized %s (%s) -> %s with --quant %s\n", f.in_dir.c_str(), LayoutName((*model)->config().layout),
              f.out_dir.c_str(), QuantModeName(*quant));
  std::printf("  %zu tensors stored converted, %zu weight files, %zu other files copied\n", stats->packed_tensors,
              stats->weight_files, stats->other_files);
  std::printf("  weights %.2f GiB -> %.2f GiB\n", GiB(stats->bytes_in), GiB(stats->bytes_out));
  std::printf("  %.1f s (load and convert %.1f s, write %.1f s), %d threads\n", convert_s + write_s, convert_s, write_s,
              (*model)->pool()->num_threads());
  return 0;
}

}  // namespace phi4mm::cli
