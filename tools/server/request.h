// OpenAI request bodies turned into engine requests. ParseChatRequest maps /v1/chat/completions
// (messages with text, image_url, input_audio and audio_url parts; tools; every generation field of
// the spec's table, each either applied or refused with a 400 that names it) onto an EngineRequest
// with the prompt rendered by the model's chat template and the media decoded and checked against
// the server's limits. ParseCompletionRequest does the same for /v1/completions (a raw prompt, no
// template, no media). Unknown top-level fields are collected in `ignored_fields` (the server
// reports them in a response header) rather than failing the request.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api_error.h"
#include "media_input.h"
#include "phi4mm/runtime/engine.h"

namespace phi4mm::server {

struct ServerLimits {
  MediaLimits media;
  int64_t max_images = 8;      // per request
  int64_t max_audios = 4;      // per request
  int64_t dynamic_hd = 0;      // detail "auto" / absent; 0 = the checkpoint's value
  int64_t max_dynamic_hd = 0;  // detail "high" and the cap of the dynamic_hd extension; 0 = checkpoint
  int64_t default_max_tokens = 2048;
  int64_t max_stop_strings = 8;
  int64_t max_choices = 16;    // `n`
  int max_json_depth = 64;
  // Speculative decoding for requests that do not choose (serve --speculative, --draft-max).
  SpeculativeMode speculative = SpeculativeMode::kNone;
  int draft_max = 8;
};

// What the parser needs to know about the loaded model.
struct ModelFacts {
  int64_t context_length = 131072;
  int64_t vocab_size = 200064;
  int64_t checkpoint_dynamic_hd = 36;
  int64_t crop_size = 448, patch_size = 14;  // the image processor's
  int64_t max_token_bytes = 128;             // the tokenizer's longest token
};
// The facts of a loaded model.
ModelFacts FactsOf(const Model& model);

// Structured output the request asks for (request_output.cc); CompileOutput turns it into the
// engine request's OutputConstraint.
struct OutputRequest {
  enum class Kind { kNone, kJsonObject, kJsonSchema, kToolCalls };
  Kind kind = Kind::kNone;
  std::string schema;   // JSON Schema text: response_format's, or the tool-call list's
  bool strict = true;   // objects hold only the listed properties unless additionalProperties says more
  bool forced = false;  // kToolCalls: tool_choice "required" or a named function (the answer is a call)
  std::string param;    // the request field an error about it names
};

struct ParsedRequest {
  std::string model;            // as the client sent it
  EngineRequest engine;         // prompt, media, prompt options and generation options
  bool stream = false;
  bool include_usage = false;   // stream_options.include_usage
  bool logprobs = false;        // return log-probabilities (top_logprobs alternatives each)
  int top_logprobs = 0;
  bool tools = false;           // tools were rendered: parse <|tool_call|> output into tool_calls
  OutputRequest output;         // response_format / the tool-call grammar
  int64_t dynamic_hd = 0;       // the crop limit the images use
  int64_t n = 1;                // choices: one engine request each, sharing the prompt's prefill
  std::vector<std::string> ignored_fields;
  // OpenAI's `prediction` content (Predicted Outputs): tokenized into
  // engine.generate.speculative.prediction by ApplyPrediction.
  std::optional<std::string> prediction;
  // The media parts in order of appearance (engine.media is filled from them once decoded).
  std::vector<MediaSource> media_sources;
};

// Media parts are checked for presence, counts and their audio format, and collected in
// out->media_sources; nothing is decoded here.
ApiError ParseChatRequest(const nlohmann::ordered_json& body, const ServerLimits& limits, const ModelFacts& facts,
                          ParsedRequest* out);
ApiError ParseCompletionRequest(const nlohmann::ordered_json& body, const ServerLimits& limits, const ModelFacts& facts,
                                ParsedRequest* out);
// Compiles out->output with the model's grammar compiler (cached by schema digest) into
// out->engine.generate.constraint: a 400 naming the field and the JSON pointer of what cannot be
// honoured, or when this build has no grammar engine.
ApiError CompileOutput(const Model& model, ParsedRequest* out);
// Tokenizes out->prediction (when given) for the engine's drafts; a 400 when it is too long.
ApiError ApplyPrediction(const Model& model, ParsedRequest* out);
// What of a parsed request needs the model: CompileOutput when it asks for structured output, then
// ApplyPrediction. The server and the Python package both call it after parsing.
ApiError ResolveWithModel(const Model& model, ParsedRequest* out);
// Whether ResolveWithModel has anything to do (the server then takes the model's lock).
bool NeedsModel(const ParsedRequest& p);

}  // namespace phi4mm::server
