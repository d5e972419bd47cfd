// `phi4mm run`: one prompt (with optional images and audio), answer streamed to stdout; optional
// --dump of named tensors.
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <iterator>

#include "cli_common.h"
#include "phi4mm/io/npy.h"

namespace phi4mm::cli {

namespace {

Result<LoraMode> ParseLoraOverride(const std::string& s, LoraMode automatic) {
  if (s == "auto") return automatic;
  if (s == "none") return LoraMode::kNone;
  if (s == "vision") return LoraMode::kVision;
  if (s == "speech") return LoraMode::kSpeech;
  return InvalidArgument("--lora must be auto, none, vision or speech, got '" + s + "'");
}

Result<std::vector<int32_t>> ParseIds(const std::string& s) {
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (pos <= s.size()) {
    const size_t end = std::min(s.find(',', pos), s.size());
    const std::string tok = s.substr(pos, end - pos);
    char* stop = nullptr;
    const long long v = std::strtoll(tok.c_str(), &stop, 10);
    if (tok.empty() || stop != tok.c_str() + tok.size() || v < 0 || v > INT32_MAX)
      return InvalidArgument("--ids must be comma-separated non-negative token ids, got '" + tok + "' in '" + s + "'");
    ids.push_back(static_cast<int32_t>(v));
    pos = end + 1;
  }
  return ids;
}

Status WriteIds(const std::string& path, const std::vector<int32_t>& ids) {
  std::vector<int64_t> v(ids.begin(), ids.end());
  return WriteNpyI64(path, v.data(), {static_cast<int64_t>(v.size())});
}

}  // namespace

int RunCommand(const ModelFlags& mf, const GenerationFlags& gf, const MediaFlags& mflags, const std::string& prompt_arg,
               const std::string& system, bool raw, const std::string& dump_dir, const std::string& lora,
               const std::string& ids_arg, const std::string& processor_tensors) {
  std::string prompt = prompt_arg;
  if (prompt == "-") prompt.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  GenerateOptions opts = gf.ToOptions();
  if (Status st = opts.Validate(); !st.ok()) return ReportError(st);
  auto media = mflags.Load();
  if (!media.ok()) return ReportError(media.status());
  std::vector<int32_t> given_ids;
  if (!ids_arg.empty()) {
    auto parsed = ParseIds(ids_arg);
    if (!parsed.ok()) return ReportError(parsed.status());
    if (!media->images.empty() || !media->audios.empty())
      return ReportError(InvalidArgument("--ids runs token ids alone; --image / --audio need -p"));
    given_ids = std::move(parsed).value();
  } else if (!processor_tensors.empty()) {
    return ReportError(InvalidArgument("--processor-tensors needs --ids (the expanded prompt ids the tensors belong to)"));
  }
  auto rendered = RenderUserPrompt(prompt, system, raw, media->images.size(), media->audios.size());
  if (!rendered.ok()) return ReportError(rendered.status());
  auto model = LoadModel(mf);
  if (!model.ok()) return ReportError(model.status());
  if (Status st = gf.ApplyOutputFormat(**model, &opts); !st.ok()) return ReportError(st);

  std::unique_ptr<NpyDumper> dumper;
  if (!dump_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(dump_dir, ec);
    if (ec) return ReportError(InvalidArgument("cannot create dump folder '" + dump_dir + "': " + ec.message()));
    dumper = std::make_unique<NpyDumper>(dump_dir);
  }
  Result<PreparedPrompt> prepared = PreparedPrompt{};
  if (given_ids.empty()) {
    prepared = PreparePrompt(**model, *rendered, *media, mflags.ToPromptOptions(), dumper.get());
  } else if (!processor_tensors.empty()) {
    auto pre = LoadProcessorTensors((*model)->config(), processor_tensors, given_ids);
    if (!pre.ok()) return ReportError(pre.status());
    prepared = EncodeMedia(**model, std::move(pre).value(), dumper.get());
  } else {
    prepared->ids = given_ids;
  }
  if (!prepared.ok()) return ReportError(prepared.status());
  auto mode = ParseLoraOverride(lora, prepared->mode);
  if (!mode.ok()) return ReportError(mode.status());
  if (mf.verbose) {
    std::fprintf(stderr, "[phi4mm] prompt: %lld tokens (%lld text", static_cast<long long>(prepared->count.total_tokens),
                 static_cast<long long>(prepared->count.text_tokens));
    for (int64_t n : prepared->count.image_tokens) std::fprintf(stderr, ", image %lld", static_cast<long long>(n));
    for (int64_t n : prepared->count.audio_tokens) std::fprintf(stderr, ", audio %lld", static_cast<long long>(n));
    std::fprintf(stderr, "), LoRA %s\n", LoraModeName(*mode));
  }

  Session session(*model);
  if (dumper) session.SetTap(dumper.get());
  auto res = session.Generate(prepared->ids, *mode, opts, [](std::string_view t) {
    std::fwrite(t.data(), 1, t.size(), stdout);
    std::fflush(stdout);
    return true;
  }, &prepared->features);
  std::fputc('\n', stdout);
  if (!res.ok()) return ReportError(res.status());
  if (dumper) {
    if (!dumper->status().ok()) return ReportError(dumper->status());
    if (Status st = WriteIds(dump_dir + "/input_ids.npy", prepared->ids); !st.ok()) return ReportError(st);
    if (Status st = WriteIds(dump_dir + "/generated_ids.npy", res->tokens); !st.ok()) return ReportError(st);
  }
  if (mf.verbose) PrintTimings(*res);
  return 0;
}

}  // namespace phi4mm::cli
