// The media parts of an OpenAI request and their bytes: base64, `data:` URIs, `file://` paths
// confined to the operator's --media-dir, the per-item size limit, and the API errors of the
// decoders (media_admission.h reads their headers and decodes them). The content's format is
// sniffed from its bytes; a declared MIME type or audio `format` is only checked to be one the
// decoders can read.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "api_error.h"
#include "phi4mm/preprocess/audio.h"
#include "phi4mm/preprocess/image.h"

namespace phi4mm::server {

struct MediaLimits {
  int64_t max_media_bytes = int64_t{20} << 20;  // one item, decoded from base64 / read from disk
  int64_t max_image_pixels = 4096 * 4096;
  int64_t max_audio_seconds = 600;
  std::string media_dir;  // empty: file:// URLs are refused
};

// One image or audio part of a request, as sent: decoded only once its memory is admitted
// (media_admission.h).
struct MediaSource {
  enum Kind { kImage, kAudio } kind = kImage;
  std::string param;         // the field named in errors
  std::string url;           // image_url.url, audio_url.url
  std::string data, format;  // input_audio.data (base64) and .format
  bool inline_data = false;  // input_audio (data) rather than a URL
  bool uploaded = false;     // `data` holds the file's bytes as uploaded (multipart), not base64
};

// The encoded bytes of a part (base64 decoded, or read from --media-dir), within the per-item
// size limit; `source` keeps its type checks (an image data URI must be image/*).
ApiError MediaBytes(const MediaSource& source, const MediaLimits& limits, std::string* out);
// A decoder's or header reader's error about an image or a clip as the API error it answers with.
ApiError ImageError(const Status& st, const std::string& param);
ApiError AudioError(const Status& st, const std::string& param);

// RFC 4648 base64 as Python's decoders take it: the standard or the URL-safe alphabet, padding
// optional, spaces and line breaks (MIME wrapping) skipped. False on any other character, on '='
// before the end, and on a length no encoder makes.
bool Base64Decode(std::string_view in, std::string* out);
std::string Base64Encode(std::string_view in);

// An input_audio.format the decoders read ("wav", "mp3", "flac", "ogg", "oga"; empty = sniff).
ApiError CheckAudioFormat(std::string_view format, const std::string& param);

}  // namespace phi4mm::server
