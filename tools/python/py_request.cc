// Python request bodies and media items -> engine requests, through the server's parser
// (py_request.h).
#include "py_request.h"

#include <charconv>
#include <cmath>
#include <cstring>

#include "phi4mm/preprocess/audio_limits.h"
#include "server/json_fields.h"

namespace phi4mm::python {

namespace {

constexpr std::string_view kMediaRef = "phi4mm-media:";

RequestError FromApi(const server::ApiError& e) { return RequestError{e.message, e.param, e.status}; }

RequestError Invalid(std::string message, std::string param = "") {
  return RequestError{std::move(message), std::move(param), 400};
}

RequestError FromStatusError(const Status& st, std::string param) {
  return FromApi(server::FromStatus(st, std::move(param)));
}

// Parses the body JSON text (the package writes it, so a parse error is a bug or a value that is
// not JSON-serialisable slipping through).
RequestError ParseJson(std::string_view text, server::Json* out) {
  try {
    *out = server::Json::parse(text);
  } catch (const server::Json::exception& e) {
    return Invalid(std::string("the request is not valid JSON: ") + e.what());
  }
  if (!out->is_object()) return Invalid("the request must be a JSON object");
  return {};
}

RequestError RefuseIgnored(const server::ParsedRequest& p) {
  if (p.ignored_fields.empty()) return {};
  std::string names;
  for (const std::string& f : p.ignored_fields) names += (names.empty() ? "" : ", ") + f;
  return Invalid("unknown argument(s): " + names, p.ignored_fields.front());
}

// Samples as double, scaled as libsndfile's normalised reads scale them.
template <typename T>
double SampleAt(const std::string& data, size_t i) {
  T v;
  std::memcpy(&v, data.data() + i * sizeof(T), sizeof(T));
  if constexpr (std::is_same_v<T, int16_t>) return static_cast<double>(v) / 32768.0;
  if constexpr (std::is_same_v<T, int32_t>) return static_cast<double>(v) / 2147483648.0;
  return static_cast<double>(v);
}

template <typename T>
Status MixDown(const MediaItem& item, AudioClip* out) {
  const size_t width = sizeof(T) * static_cast<size_t>(item.channels);
  if (item.data.size() % width != 0)
    return InvalidArgument(item.label + ": " + std::to_string(item.data.size()) + " bytes of " + item.dtype +
                           " samples do not divide into frames of " + std::to_string(item.channels) + " channels");
  const size_t frames = item.data.size() / width;
  if (frames == 0) return InvalidArgument(item.label + ": the audio holds no samples");
  if (static_cast<int64_t>(frames) > kMaxAudioSeconds * item.sample_rate)
    return OutOfRange(item.label + ": the clip is longer than " + std::to_string(kMaxAudioSeconds) +
                      " s, more than the model's context can hold");
  out->sample_rate = item.sample_rate;
  out->samples.resize(frames);
  const auto channels = static_cast<size_t>(item.channels);
  for (size_t f = 0; f < frames; ++f) {
    double v = SampleAt<T>(item.data, f * channels);
    if (channels > 1) {
      double sum = 0.0;
      for (size_t c = 0; c < channels; ++c) sum += SampleAt<T>(item.data, f * channels + c);
      v = sum / static_cast<double>(channels);
    }
    if (!std::isfinite(v))
      return InvalidArgument(item.label + ": sample " + std::to_string(f) + " is " +
                             (std::isnan(v) ? "NaN" : "infinite"));
    out->samples[f] = static_cast<float>(v);
  }
  return Status::Ok();
}

// Fills out->engine.media from the items the parsed media sources refer to, in the sources' order.
RequestError DecodeReferenced(server::ParsedRequest* out, std::vector<MediaItem>& media) {
  std::vector<bool> used(media.size(), false);
  for (const server::MediaSource& src : out->media_sources) {
    const std::string& url = src.url;
    size_t k = 0;
    bool ref = url.starts_with(kMediaRef) && url.size() > kMediaRef.size();
    if (ref) {
      const char* end = url.data() + url.size();
      const auto [ptr, ec] = std::from_chars(url.data() + kMediaRef.size(), end, k);
      ref = ec == std::errc() && ptr == end;
    }
    if (!ref || k >= media.size() || used[k])
      return Invalid(src.param + ": media parts are given as Python objects (see phi4mm.Model.chat), not URLs",
                     src.param);
    used[k] = true;
    MediaItem& item = media[k];
    const bool image_item = item.kind == MediaItem::Kind::kImagePixels || item.kind == MediaItem::Kind::kImageBytes;
    if (image_item != (src.kind == server::MediaSource::kImage))
      return Invalid(src.param + ": the media item is not of the part's kind", src.param);
    if (image_item) {
      Image img;
      if (Status st = DecodeImageItem(item, &img); !st.ok()) return FromStatusError(st, item.label);
      out->engine.media.images.push_back(std::move(img));
    } else {
      AudioClip clip;
      if (Status st = DecodeAudioItem(item, &clip); !st.ok()) return FromStatusError(st, item.label);
      out->engine.media.audios.push_back(std::move(clip));
    }
    std::string().swap(item.data);
  }
  out->media_sources.clear();
  return {};
}

}  // namespace

server::ServerLimits LibraryLimits() {
  server::ServerLimits l;
  l.max_images = 1 << 16;
  l.max_audios = 1 << 16;
  return l;
}

Status DecodeImageItem(const MediaItem& item, Image* out) {
  if (item.kind == MediaItem::Kind::kImageBytes) {
    const auto* p = reinterpret_cast<const uint8_t*>(item.data.data());
    PHI4MM_ASSIGN_OR_RETURN(*out, DecodeImageBytes({p, item.data.size()}, item.label));
    return Status::Ok();
  }
  if (item.width <= 0 || item.height <= 0)
    return InvalidArgument(item.label + ": an image of " + std::to_string(item.width) + "x" +
                           std::to_string(item.height) + " pixels is empty");
  const ImageDecodeLimits limits;
  if (item.width > limits.max_pixels / item.height)
    return InvalidArgument(item.label + ": " + std::to_string(item.width) + "x" + std::to_string(item.height) +
                           " pixels is more than the decoder's limit of " + std::to_string(limits.max_pixels));
  if (static_cast<int64_t>(item.data.size()) != item.width * item.height * 3)
    return InvalidArgument(item.label + ": " + std::to_string(item.data.size()) + " bytes of pixels for a " +
                           std::to_string(item.width) + "x" + std::to_string(item.height) + " RGB image (expected " +
                           std::to_string(item.width * item.height * 3) + ")");
  out->width = item.width;
  out->height = item.height;
  out->rgb.assign(item.data.begin(), item.data.end());
  return Status::Ok();
}

Status DecodeAudioItem(const MediaItem& item, AudioClip* out) {
  if (item.kind == MediaItem::Kind::kAudioBytes) {
    const auto* p = reinterpret_cast<const uint8_t*>(item.data.data());
    PHI4MM_ASSIGN_OR_RETURN(*out, DecodeAudioBytes({p, item.data.size()}, item.label));
    return Status::Ok();
  }
  if (item.sample_rate < kMinAudioSampleRate || item.sample_rate > kMaxAudioSampleRate)
    return InvalidArgument(item.label + ": sample rate " + std::to_string(item.sample_rate) +
                           " Hz is outside the supported range " + std::to_string(kMinAudioSampleRate) + "-" +
                           std::to_string(kMaxAudioSampleRate) + " Hz");
  if (item.channels <= 0 || item.channels > 64)
    return InvalidArgument(item.label + ": " + std::to_string(item.channels) +
                           " channels is not a valid channel count");
  if (item.dtype == "float32") return MixDown<float>(item, out);
  if (item.dtype == "float64") return MixDown<double>(item, out);
  if (item.dtype == "int16") return MixDown<int16_t>(item, out);
  if (item.dtype == "int32") return MixDown<int32_t>(item, out);
  return InvalidArgument(item.label + ": samples of type " + item.dtype +
                         " are not supported; give float32, float64, int16 or int32");
}

RequestError BuildChatRequest(const Model& model, std::string_view body_json, std::vector<MediaItem> media,
                              server::ParsedRequest* out) {
  server::Json body;
  if (RequestError e = ParseJson(body_json, &body); !e.ok()) return e;
  if (server::ApiError e = server::ParseChatRequest(body, LibraryLimits(), server::FactsOf(model), out); !e.ok())
    return FromApi(e);
  if (RequestError e = RefuseIgnored(*out); !e.ok()) return e;
  if (RequestError e = DecodeReferenced(out, media); !e.ok()) return e;
  if (server::ApiError e = server::ResolveWithModel(model, out); !e.ok()) return FromApi(e);
  return {};
}

RequestError BuildCompletionRequest(const Model& model, std::string_view body_json, server::ParsedRequest* out) {
  server::Json body;
  if (RequestError e = ParseJson(body_json, &body); !e.ok()) return e;
  if (server::ApiError e = server::ParseCompletionRequest(body, LibraryLimits(), server::FactsOf(model), out); !e.ok())
    return FromApi(e);
  if (RequestError e = RefuseIgnored(*out); !e.ok()) return e;
  if (server::ApiError e = server::ResolveWithModel(model, out); !e.ok()) return FromApi(e);
  return {};
}

}  // namespace phi4mm::python
