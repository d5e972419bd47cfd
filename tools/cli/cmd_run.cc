// `phi4mm run`: one prompt, answer streamed to stdout; optional --dump of named tensors.
#include <cstdio>
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

Status WriteIds(const std::string& path, const std::vector<int32_t>& ids) {
  std::vector<int64_t> v(ids.begin(), ids.end());
  return WriteNpyI64(path, v.data(), {static_cast<int64_t>(v.size())});
}

}  // namespace

int RunCommand(const ModelFlags& mf, const GenerationFlags& gf, const std::string& prompt_arg, const std::string& system,
               bool raw, const std::string& dump_dir, const std::string& lora) {
  std::string prompt = prompt_arg;
  if (prompt == "-") prompt.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  const GenerateOptions opts = gf.ToOptions();
  if (Status st = opts.Validate(); !st.ok()) return ReportError(st);
  auto model = LoadModel(mf);
  if (!model.ok()) return ReportError(model.status());

  std::string rendered = prompt;
  if (!raw) {
    std::vector<ChatMessage> msgs;
    if (!system.empty()) msgs.push_back({"system", system, std::nullopt});
    msgs.push_back({"user", prompt, std::nullopt});
    auto r = RenderChatPrompt(msgs, true);
    if (!r.ok()) return ReportError(r.status());
    rendered = *r;
  }
  auto ids = EncodePrompt((*model)->tokenizer(), rendered);
  if (!ids.ok()) return ReportError(ids.status());
  auto mode = ParseLoraOverride(lora, LoraModeForInputs(false, false));
  if (!mode.ok()) return ReportError(mode.status());

  Session session(*model);
  std::unique_ptr<NpyDumper> dumper;
  if (!dump_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(dump_dir, ec);
    if (ec) return ReportError(InvalidArgument("cannot create dump folder '" + dump_dir + "': " + ec.message()));
    dumper = std::make_unique<NpyDumper>(dump_dir);
    session.SetTap(dumper.get());
  }
  auto res = session.Generate(*ids, *mode, opts, [](std::string_view t) {
    std::fwrite(t.data(), 1, t.size(), stdout);
    std::fflush(stdout);
    return true;
  });
  std::fputc('\n', stdout);
  if (!res.ok()) return ReportError(res.status());
  if (dumper) {
    if (!dumper->status().ok()) return ReportError(dumper->status());
    if (Status st = WriteIds(dump_dir + "/input_ids.npy", *ids); !st.ok()) return ReportError(st);
    if (Status st = WriteIds(dump_dir + "/generated_ids.npy", res->tokens); !st.ok()) return ReportError(st);
  }
  if (mf.verbose) PrintTimings(*res);
  return 0;
}

}  // namespace phi4mm::cli
