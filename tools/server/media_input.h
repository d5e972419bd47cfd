// Media of an OpenAI request turned into decoded images and audio clips: strict base64, `data:`
// URIs, `file://` paths confined to the operator's --media-dir, and the per-item limits (encoded
// size, image pixels from the header before any pixel is decoded, audio seconds from the header
// before any sample is decoded). The content's format is sniffed from its bytes; a declared MIME
// type or audio `format` is only checked to be one the decoders can read.
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

// Strict RFC 4648 base64 (padding optional, no whitespace). False on any other character.
bool Base64Decode(std::string_view in, std::string* out);
std::string Base64Encode(std::string_view in);

// `param` names the field in errors (e.g. "messages[0].content[1].image_url.url").
ApiError DecodeImageUrl(std::string_view url, const MediaLimits& limits, const std::string& param, Image* out);
// `format` as in input_audio.format ("wav", "mp3", "flac", "ogg"; empty = sniff only).
ApiError DecodeAudioData(std::string_view base64, std::string_view format, const MediaLimits& limits,
                         const std::string& param, AudioClip* out);
ApiError DecodeAudioUrl(std::string_view url, const MediaLimits& limits, const std::string& param, AudioClip* out);
// Raw audio bytes (a multipart upload).
ApiError DecodeAudioUpload(std::string_view bytes, const MediaLimits& limits, const std::string& param, AudioClip* out);

}  // namespace phi4mm::server
