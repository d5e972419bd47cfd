// A C++ user of the installed library: loads the model folder given as argv[1], answers one chat
// turn greedily (6 tokens) with phi4mm::Chat, and the same turn through the batched engine, printing
// both answers (equal) and the tokens' ids. Exit 0 only when all of that worked.
#include <cstdio>
#include <string>

#include "phi4mm/runtime/chat.h"
#include "phi4mm/runtime/engine.h"
#include "phi4mm/tokenizer/chat_format.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s MODEL_DIR\n", argv[0]);
    return 2;
  }
  phi4mm::LoadOptions load;
  load.num_threads = 2;
  auto model = phi4mm::Model::Load(argv[1], load);
  if (!model.ok()) {
    std::fprintf(stderr, "load: %s\n", model.status().ToString().c_str());
    return 1;
  }
  phi4mm::GenerateOptions opts;
  opts.max_new_tokens = 6;
  phi4mm::Chat chat(*model);
  auto answer = chat.Send("hello", opts);
  if (!answer.ok()) {
    std::fprintf(stderr, "chat: %s\n", answer.status().ToString().c_str());
    return 1;
  }
  std::printf("answer: %s\n", answer->text.c_str());

  auto engine = phi4mm::Engine::Start(*model, phi4mm::EngineOptions{});
  if (!engine.ok()) return 1;
  phi4mm::EngineRequest request;
  const phi4mm::ChatMessage turn{"user", "hello", std::nullopt};
  auto rendered = phi4mm::RenderChatPrompt(std::span(&turn, 1), /*add_generation_prompt=*/true);
  if (!rendered.ok()) return 1;
  request.prompt = *rendered;
  request.generate = opts;
  auto handle = (*engine)->Submit(std::move(request));
  if (!handle.ok()) {
    std::fprintf(stderr, "submit: %s\n", handle.status().ToString().c_str());
    return 1;
  }
  auto result = handle->Wait();
  if (!result.ok()) return 1;
  std::printf("engine: %s\n", result->generation.text.c_str());
  std::printf("ids:");
  for (int32_t id : result->generation.tokens) std::printf(" %d", id);
  std::printf("\n");
  return answer->text == result->generation.text ? 0 : 1;
}
