// phi4mm command-line entry point: parses the subcommand and its flags and dispatches.
#include <cstdio>
#include <string>

#include "cli_common.h"
#include "phi4mm/kernels/isa.h"

int main(int argc, char** argv) {
  using namespace phi4mm::cli;
  CLI::App app{"phi4mm: run Microsoft's Phi-4-multimodal-instruct from its Hugging Face checkpoint"};
  app.require_subcommand(1);

  ModelFlags run_model, chat_model, info_model, tok_model, count_model;
  GenerationFlags run_gen, chat_gen;
  MediaFlags run_media, chat_media, tok_media, count_media;
  std::string prompt, system, dump_dir, lora = "auto", text, ids, processor_tensors;
  bool raw = false, info_json = false, tok_chat = false;

  CLI::App* run = app.add_subcommand("run", "Answer one prompt, streamed to stdout");
  run_model.Register(run);
  run_gen.Register(run);
  run_media.Register(run);
  CLI::Option* prompt_opt = run->add_option("-p,--prompt", prompt, "The user prompt ('-' reads stdin)");
  run->add_option("--ids", ids,
                  "Comma-separated token ids to run as the whole prompt instead of -p (no chat template, no media; "
                  "with --dump, the logits of every step are written)")
      ->excludes(prompt_opt);
  run->add_option("--processor-tensors", processor_tensors,
                  "With --ids: a folder of .npy processor tensors (pixel_values, image_attention_mask, image_sizes, "
                  "audio_embeds, audio_attention_mask, audio_sizes, batched as ONNX Runtime GenAI's processors "
                  "make them) whose image/audio features fill the ids' placeholders");
  run->add_option("--system", system, "System prompt");
  run->add_flag("--raw", raw, "Use the prompt as is, without the chat template");
  run->add_option("--dump", dump_dir, "Write named intermediate tensors and logits as .npy files to this folder");
  run->add_option("--lora", lora, "Debugging: force the LoRA mode (auto, none, vision, speech)")->capture_default_str();

  CLI::App* chat = app.add_subcommand("chat", "Interactive multi-turn chat (stdin/stdout)");
  chat_model.Register(chat);
  chat_gen.Register(chat);
  chat_media.Register(chat);
  chat->add_option("--system", system, "System prompt");

  CLI::App* count = app.add_subcommand("count", "Print as JSON the prompt tokens each image/audio and the whole prompt take");
  count_model.Register(count);
  count_media.Register(count);
  count->add_option("-p,--prompt", prompt, "The user prompt")->capture_default_str();
  count->add_option("--system", system, "System prompt");

  CLI::App* info = app.add_subcommand("info", "Summarise a checkpoint");
  info_model.Register(info);
  info->add_flag("--json", info_json, "Print JSON");

  CLI::App* tokenize = app.add_subcommand("tokenize", "Print the token ids of a text as JSON");
  tok_model.Register(tokenize);
  tok_media.Register(tokenize);
  tokenize->add_option("--text", text, "Text to tokenize")->required();
  tokenize->add_flag("--chat", tok_chat, "Render the text as a user turn with the chat template first");

  BenchFlags bench_flags;
  CLI::App* bench = app.add_subcommand("bench", "Benchmark prefill, decode, LoRA, vision and audio against measured ceilings");
  bench_flags.Register(bench);

  QuantizeFlags quantize_flags;
  CLI::App* quantize =
      app.add_subcommand("quantize", "Write a pre-quantized copy of a checkpoint that later starts map without converting");
  quantize_flags.Register(quantize);

  ServeFlags serve_flags;
  CLI::App* serve = app.add_subcommand("serve", "Serve the model over an OpenAI-compatible HTTP API");
  serve_flags.Register(serve);

  PerplexityFlags perplexity_flags;
  CLI::App* perplexity = app.add_subcommand(
      "perplexity", "Perplexity of a text and KL divergence against a reference run, scored as llama-perplexity does");
  perplexity_flags.Register(perplexity);

  ExportFlags export_flags;
  CLI::App* export_cmd = app.add_subcommand(
      "export", "Write the ONNX Runtime GenAI phi4mm package (ONNX models, genai_config.json, processors, tokenizer)");
  export_flags.Register(export_cmd);

  bool known = argc <= 1 || argv[1][0] == '-';
  std::string names;
  for (const CLI::App* sub : app.get_subcommands({})) {
    names += (names.empty() ? "" : ", ") + sub->get_name();
    known = known || sub->get_name() == argv[1];
  }
  if (!known) {
    std::fprintf(stderr, "phi4mm: error: unknown command '%s' (commands: %s; see phi4mm --help)\n", argv[1],
                 names.c_str());
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "phi4mm: error: %s (see phi4mm %s--help)\n", e.what(),
                 argc > 1 && argv[1][0] != '-' ? (std::string(argv[1]) + " ").c_str() : "");
    return 2;
  }
  // A PHI4MM_ISA the build or the CPU cannot honour stops every command before it starts.
  if (const phi4mm::Status isa = phi4mm::IsaOverrideStatus(); !isa.ok()) return ReportError(isa);
  if (run->parsed()) {
    if (prompt.empty() && ids.empty()) {
      std::fprintf(stderr, "phi4mm: error: run needs -p/--prompt or --ids (see phi4mm run --help)\n");
      return 2;
    }
    return RunCommand(run_model, run_gen, run_media, prompt, system, raw, dump_dir, lora, ids, processor_tensors);
  }
  if (chat->parsed()) return ChatCommand(chat_model, chat_gen, chat_media, system);
  if (info->parsed()) return InfoCommand(info_model, info_json);
  if (tokenize->parsed()) return TokenizeCommand(tok_model, tok_media, text, tok_chat);
  if (count->parsed()) return CountCommand(count_model, count_media, prompt, system);
  if (bench->parsed()) return BenchCommand(bench_flags);
  if (quantize->parsed()) return QuantizeCommand(quantize_flags);
  if (serve->parsed()) return ServeCommand(serve_flags);
  if (perplexity->parsed()) return PerplexityCommand(perplexity_flags);
  if (export_cmd->parsed()) return ExportCommand(export_flags);
  return 2;
}
