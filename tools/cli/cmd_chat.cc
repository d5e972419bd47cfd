// `phi4mm chat`: interactive multi-turn conversation; the KV cache is kept between turns.
// Lines starting with '/' are commands: /reset, /exit.
#include <cstdio>
#include <iostream>
#include <string>
#include <unistd.h>

#include "cli_common.h"

namespace phi4mm::cli {

int ChatCommand(const ModelFlags& mf, const GenerationFlags& gf, const std::string& system) {
  const GenerateOptions opts = gf.ToOptions();
  if (Status st = opts.Validate(); !st.ok()) return ReportError(st);
  auto model = LoadModel(mf);
  if (!model.ok()) return ReportError(model.status());
  Chat chat(*model, system);
  const bool tty = isatty(STDIN_FILENO);
  if (tty) std::fprintf(stderr, "phi4mm chat: type a message; /reset starts over, /exit or Ctrl-D quits.\n");
  std::string line;
  int rc = 0;
  for (;;) {
    if (tty) std::fprintf(stderr, "> ");
    if (!std::getline(std::cin, line)) break;
    if (line.empty()) continue;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      chat.Reset();
      std::fprintf(stderr, "[conversation reset]\n");
      continue;
    }
    if (line[0] == '/') {
      std::fprintf(stderr, "phi4mm: unknown command '%s' (try /reset or /exit)\n", line.c_str());
      continue;
    }
    auto res = chat.Send(line, opts, [](std::string_view t) {
      std::fwrite(t.data(), 1, t.size(), stdout);
      std::fflush(stdout);
      return true;
    });
    std::fputc('\n', stdout);
    std::fflush(stdout);
    if (!res.ok()) {
      rc = ReportError(res.status());
      continue;
    }
    if (mf.verbose) {
      PrintTimings(*res);
      std::fprintf(stderr, "[phi4mm] conversation: %zu tokens, %lld cached\n", chat.session().tokens().size(),
                   static_cast<long long>(chat.session().cached_tokens()));
    }
  }
  return rc;
}

}  // namespace phi4mm::cli
