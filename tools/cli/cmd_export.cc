// `phi4mm export`: writes the ONNX Runtime GenAI `phi4mm` package of a checkpoint
// (src/phi4mm/export/package.h, docs/onnx-export.md). Built when libonnx-dev and libprotobuf-dev
// were found at configure time; otherwise the command says how to get it.
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "cli_common.h"
#ifdef PHI4MM_HAVE_EXPORT
#include "phi4mm/export/package.h"
#endif

namespace phi4mm::cli {

void ExportFlags::Register(CLI::App* app) {
  app->add_option("-m,--model", in_dir, "Checkpoint folder to read (Hugging Face layout, original or native)")
      ->required();
  app->add_option("-o,--output", out_dir, "Folder to write the package to")->required();
  app->add_option("--precision", precision,
                  "fp32; fp16 (weights and I/O); int4 (the decoder's linears as 4-bit MatMulNBits, its lm_head and "
                  "LoRA at 8 bits; float32 I/O for cpu, float16 for cuda)")
      ->capture_default_str();
  app->add_option("--target", target,
                  "Execution provider the package is configured for: cpu or cuda (int4: I/O type and "
                  "MatMulNBits accuracy_level)")
      ->capture_default_str();
  app->add_option("--lora", lora,
                  "How the decoder applies the vision/speech LoRA it picks from the prompt's ids: if (only the "
                  "active adapter runs, inside If nodes), sum (both adapters times 0/1 gates, no control flow), "
                  "none (no adapters: the bare language model)")
      ->capture_default_str();
  app->add_flag("--force", force, "Write into a non-empty output folder (its files are overwritten)");
  app->add_flag("--allow-unrunnable", allow_unrunnable,
                "Write the package even when ONNX Runtime could not run it (a head size that is not a multiple "
                "of 16, as in the tiny test fixtures); for the ONNX checkers only");
}

int ExportCommand(const ExportFlags& f) {
#ifndef PHI4MM_HAVE_EXPORT
  (void)f;
  return ReportError(Unsupported(
      "this phi4mm was built without the ONNX exporter: install libonnx-dev and libprotobuf-dev "
      "(scripts/setup.sh), re-run cmake and rebuild"));
#else
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(f.out_dir, ec)) {
    if (!fs::is_directory(f.out_dir, ec))
      return ReportError(InvalidArgument("output '" + f.out_dir + "' exists and is not a folder"));
    if (!fs::is_empty(f.out_dir, ec) && !f.force)
      return ReportError(InvalidArgument("output folder '" + f.out_dir +
                                         "' is not empty; choose another one or pass --force to overwrite its files"));
  }
  exporter::ExportOptions opts;
  opts.precision = f.precision;
  opts.target = f.target;
  opts.lora = f.lora;
  opts.require_runnable = !f.allow_unrunnable;
  const auto t0 = std::chrono::steady_clock::now();
  auto summary = exporter::ExportPackage(f.in_dir, f.out_dir, opts);
  if (!summary.ok()) return ReportError(summary.status().WithContext("exporting '" + f.in_dir + "'"));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("exported %s -> %s (--precision %s --target %s --lora %s) in %.1f s\n", f.in_dir.c_str(),
              f.out_dir.c_str(), opts.precision.c_str(), opts.target.c_str(), opts.lora.c_str(), s);
  std::printf("  %.2f GiB of weights; decoder KV layers %lld%s\n",
              static_cast<double>(summary->external_bytes) / (1024.0 * 1024.0 * 1024.0),
              static_cast<long long>(summary->kv_layers),
              summary->lora_register ? " (the last is the LoRA mode register)" : "");
  for (const std::string& file : summary->files) std::printf("  %s\n", file.c_str());
  return 0;
#endif
}

}  // namespace phi4mm::cli
