// What the Python package (python/phi4mm) hands the native side, turned into engine requests. The
// package renders nothing itself: it sends an OpenAI request body as JSON text, each media part
// replaced by a reference `phi4mm-media:K` into a list of items it passes beside the body (pixels
// of a PIL image or numpy array, encoded bytes, samples of a numpy array), and the server's own
// request parser (tools/server/request.h) makes the engine request. So a Python chat renders,
// numbers its placeholders, validates its sampling fields and compiles its response_format and
// tools exactly as `phi4mm serve` does; only the media come from Python objects instead of URLs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "phi4mm/runtime/model.h"
#include "server/request.h"

namespace phi4mm::python {

// One media part of a request, as the package sends it.
struct MediaItem {
  enum class Kind { kImagePixels, kImageBytes, kAudioSamples, kAudioBytes };
  Kind kind = Kind::kImageBytes;
  std::string data;  // pixels (H×W×3 uint8), encoded bytes, or samples (frames×channels)
  int64_t width = 0, height = 0;
  std::string dtype;        // samples: "float32", "float64", "int16" or "int32"
  int64_t channels = 1;     // samples: interleaved channels, averaged to mono
  int64_t sample_rate = 0;  // samples
  std::string label;        // names the part in errors ("messages[0].content[1]")
};

// A request error: the API error's message (naming the field) and whether it is the caller's
// input (400-class) or the engine's state (queue full, shutting down, a failure).
struct RequestError {
  std::string message;
  std::string param;
  int status = 0;  // the HTTP status `phi4mm serve` would answer with
  bool ok() const { return status == 0; }
};

// The limits a library caller gets: the server's defaults, except that the number of images and
// clips per request is the caller's own business (bounded by the context).
server::ServerLimits LibraryLimits();

// Parses a chat body (ParseChatRequest), matches its media references to `media` and decodes
// them into out->engine.media, and compiles response_format / tools into the output constraint.
// Unknown top-level fields are an error here (a keyword argument the package does not know).
RequestError BuildChatRequest(const Model& model, std::string_view body_json, std::vector<MediaItem> media,
                              server::ParsedRequest* out);
// A completion body with `prompt` as token ids or text (ParseCompletionRequest).
RequestError BuildCompletionRequest(const Model& model, std::string_view body_json, server::ParsedRequest* out);

// Decodes one item: pixels are checked against width × height × 3; samples are converted to
// double (integers scaled as libsndfile reads them: int16 / 32768, int32 / 2^31), their channels
// averaged in double and the mean rounded to float, so a clip read by Python's `wave` or
// soundfile gives the samples `phi4mm run` reads from the same file.
Status DecodeImageItem(const MediaItem& item, Image* out);
Status DecodeAudioItem(const MediaItem& item, AudioClip* out);

}  // namespace phi4mm::python
