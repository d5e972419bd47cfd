// libFuzzer target for the server's request parser: arbitrary bytes as a /v1/chat/completions or
// /v1/completions body (a leading 0x01 byte picks the latter) through ParseBody and the OpenAI -> EngineRequest
// mapping, then the media admission path (base64, data: URIs, the header readers and their memory
// plan, the image and audio decoders, under small limits). A result must be either a parsed request within the limits or a 4xx error whose body is
// valid JSON; any crash, sanitizer report or abort is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "server/request.h"
#include "server/json_fields.h"
#include "server/media_admission.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace phi4mm::server;
  if (size == 0) return 0;
  const bool chat = data[0] != 1;
  std::string_view body(reinterpret_cast<const char*>(data), size);
  if (!chat) body.remove_prefix(1);
  ServerLimits limits;
  limits.media.max_media_bytes = 256 << 10;
  limits.media.max_image_pixels = 1 << 20;
  limits.media.max_audio_seconds = 5;
  limits.max_images = 3;
  limits.max_audios = 2;
  ModelFacts facts;
  Json j;
  ApiError e = ParseBody(body, limits.max_json_depth, &j);
  ParsedRequest p;
  if (e.ok()) e = chat ? ParseChatRequest(j, limits, facts, &p) : ParseCompletionRequest(j, limits, facts, &p);
  if (e.ok()) {
    // The admission path: each item's bytes and header, then the decoders.
    int64_t images = 0, audios = 0;
    for (const MediaSource& m : p.media_sources) (m.kind == MediaSource::kImage ? images : audios) += 1;
    if (images > limits.max_images || audios > limits.max_audios) std::abort();
    PlannedMedia planned;
    phi4mm::ImageProcessorOptions io;
    e = PlanMedia(p.media_sources, limits.media, io, &planned);
    if (e.ok()) {
      if (planned.peak_bytes < 0 || planned.held_bytes > planned.peak_bytes) std::abort();
      e = DecodeMedia(planned, limits.media, true, nullptr, &p.engine.media);
    }
  }
  if (e.ok()) {
    if (p.engine.prompt.empty() && p.engine.prompt_ids.empty()) std::abort();
    if (static_cast<int64_t>(p.engine.media.images.size()) > limits.max_images) std::abort();
    if (static_cast<int64_t>(p.engine.media.audios.size()) > limits.max_audios) std::abort();
    if (p.engine.generate.max_new_tokens < 1) std::abort();
    if (!p.engine.generate.Validate(facts.vocab_size).ok()) std::abort();
  } else {
    if (e.status != 400 && e.status != 413) std::abort();
    if (e.message.empty()) std::abort();
    if (Json::parse(ErrorBody(e), nullptr, false).is_discarded()) std::abort();
  }
  return 0;
}
