// `phi4mm chat`: interactive multi-turn conversation; the KV cache is kept between turns. Lines
// starting with '/' are commands: /image PATH and /audio PATH attach media to the next message,
// /reset starts over, /exit quits.
#include <cstdio>
#include <iostream>
#include <string>
#include <unistd.h>

#include "cli_common.h"

namespace phi4mm::cli {

namespace {

// "/image a.jpg" -> ("image", "a.jpg").
std::pair<std::string, std::string> SplitCommand(const std::string& line) {
  const size_t sp = line.find(' ');
  if (sp == std::string::npos) return {line.substr(1), ""};
  size_t arg = line.find_first_not_of(' ', sp);
  return {line.substr(1, sp - 1), arg == std::string::npos ? "" : line.substr(arg)};
}

}  // namespace

int ChatCommand(const ModelFlags& mf, const GenerationFlags& gf, const MediaFlags& mflags, const std::string& system) {
  GenerateOptions opts = gf.ToOptions();
  if (Status st = opts.Validate(); !st.ok()) return ReportError(st);
  auto first_media = mflags.Load();
  if (!first_media.ok()) return ReportError(first_media.status());
  auto model = LoadModel(mf);
  if (!model.ok()) return ReportError(model.status());
  if (Status st = gf.ApplyOutputFormat(**model, &opts); !st.ok()) return ReportError(st);
  Chat chat(*model, system);
  MediaInputs pending = std::move(first_media).value();
  const bool tty = isatty(STDIN_FILENO);
  if (tty)
    std::fprintf(stderr, "phi4mm chat: type a message; /image PATH and /audio PATH attach media to the next one, "
                         "/reset starts over, /exit or Ctrl-D quits.\n");
  std::string line;
  int rc = 0;
  for (;;) {
    if (tty) std::fprintf(stderr, "> ");
    if (!std::getline(std::cin, line)) break;
    if (line.empty()) continue;
    if (line[0] == '/') {
      const auto [cmd, arg] = SplitCommand(line);
      if (cmd == "exit" || cmd == "quit") break;
      if (cmd == "reset") {
        chat.Reset();
        pending = {};
        std::fprintf(stderr, "[conversation reset]\n");
      } else if (cmd == "image" && !arg.empty()) {
        auto img = DecodeImageFile(arg);
        if (!img.ok()) rc = ReportError(img.status());
        else pending.images.push_back(std::move(img).value());
      } else if (cmd == "audio" && !arg.empty()) {
        auto clip = DecodeAudioFile(arg);
        if (!clip.ok()) rc = ReportError(clip.status());
        else pending.audios.push_back(std::move(clip).value());
      } else {
        std::fprintf(stderr, "phi4mm: unknown command '%s' (try /image PATH, /audio PATH, /reset or /exit)\n",
                     line.c_str());
      }
      continue;
    }
    auto res = chat.Send(line, pending, opts, [](std::string_view t) {
      std::fwrite(t.data(), 1, t.size(), stdout);
      std::fflush(stdout);
      return true;
    }, mflags.ToPromptOptions());
    std::fputc('\n', stdout);
    std::fflush(stdout);
    if (!res.ok()) {
      rc = ReportError(res.status());
      continue;
    }
    pending = {};
    if (mf.verbose) {
      PrintTimings(*res);
      std::fprintf(stderr, "[phi4mm] conversation: %zu tokens, %lld cached\n", chat.session().tokens().size(),
                   static_cast<long long>(chat.session().cached_tokens()));
    }
  }
  return rc;
}

}  // namespace phi4mm::cli
