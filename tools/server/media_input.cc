// Base64, data: URIs, file:// under --media-dir, and the decoders' errors as API errors (media_input.h).
#include "media_input.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <span>

namespace phi4mm::server {

namespace {

constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::array<int8_t, 256> B64Table() {
  std::array<int8_t, 256> t{};
  t.fill(-1);
  for (int i = 0; i < 64; ++i) t[static_cast<uint8_t>(kB64[i])] = static_cast<int8_t>(i);
  return t;
}

std::string MiB(int64_t bytes) { return std::to_string((bytes + (1 << 20) - 1) >> 20) + " MiB"; }

ApiError TooLarge(const std::string& param, int64_t size, const MediaLimits& limits) {
  ApiError e = InvalidRequest(param, "the media item is " + MiB(size) + ", over the server's limit of " +
                                         MiB(limits.max_media_bytes) + " per item (--max-media-mb)",
                              "request_too_large");
  e.status = 413;
  return e;
}

// The decoded payload of a base64 field, with the size checked before decoding.
ApiError DecodePayload(std::string_view b64, const MediaLimits& limits, const std::string& param, std::string* out) {
  int64_t decoded_size = static_cast<int64_t>(b64.size() / 4 * 3);
  if (decoded_size > limits.max_media_bytes) {  // line breaks do not count
    const auto symbols = std::count_if(b64.begin(), b64.end(), [](char c) { return c != '\n' && c != '\r' && c != ' ' && c != '\t'; });
    decoded_size = static_cast<int64_t>(symbols / 4 * 3);
    if (decoded_size > limits.max_media_bytes) return TooLarge(param, decoded_size, limits);
  }
  if (b64.empty()) return InvalidRequest(param, "the media data is empty");
  if (!Base64Decode(b64, out))
    return InvalidRequest(param, "the media data is not valid base64 (RFC 4648, the standard or the URL-safe alphabet; "
                                 "line breaks are allowed)", "invalid_base64");
  return {};
}

struct DataUri {
  std::string_view mime;
  std::string_view payload;
};

// "data:<mime>;base64,<payload>"; false when `url` is not a base64 data URI.
bool ParseDataUri(std::string_view url, DataUri* out) {
  if (url.substr(0, 5) != "data:") return false;
  const size_t comma = url.find(',');
  if (comma == std::string_view::npos) return false;
  std::string_view meta = url.substr(5, comma - 5);
  constexpr std::string_view kB64Suffix = ";base64";
  if (meta.size() < kB64Suffix.size() || meta.substr(meta.size() - kB64Suffix.size()) != kB64Suffix) return false;
  meta.remove_suffix(kB64Suffix.size());
  const size_t semi = meta.find(';');  // parameters such as ;charset=...
  out->mime = meta.substr(0, semi);
  out->payload = url.substr(comma + 1);
  return true;
}

// Reads a file:// URL confined to limits.media_dir.
ApiError ReadLocalFile(std::string_view url, const MediaLimits& limits, const std::string& param, std::string* out) {
  if (limits.media_dir.empty())
    return InvalidRequest(param, "file:// URLs are disabled on this server (start it with --media-dir DIR to allow "
                                 "files under DIR)");
  std::string_view path = url.substr(7);
  if (path.empty() || path[0] != '/') return InvalidRequest(param, "a file:// URL needs an absolute path");
  std::error_code ec;
  const std::filesystem::path root = std::filesystem::weakly_canonical(limits.media_dir, ec);
  const std::filesystem::path p = std::filesystem::weakly_canonical(std::filesystem::path(std::string(path)), ec);
  if (ec) return InvalidRequest(param, "the file:// path cannot be resolved");
  auto [r, q] = std::mismatch(root.begin(), root.end(), p.begin(), p.end());
  if (r != root.end()) return InvalidRequest(param, "the file:// path is outside the server's --media-dir");
  if (!std::filesystem::is_regular_file(p, ec)) return InvalidRequest(param, "the file:// path is not a regular file");
  const auto size = static_cast<int64_t>(std::filesystem::file_size(p, ec));
  if (ec) return InvalidRequest(param, "the file:// path cannot be read");
  if (size > limits.max_media_bytes) return TooLarge(param, size, limits);
  std::ifstream f(p, std::ios::binary);
  out->assign(static_cast<size_t>(size), '\0');
  if (!f.read(out->data(), size)) return InvalidRequest(param, "the file:// path cannot be read");
  return {};
}

// The bytes behind an image URL.
ApiError ImageUrlBytes(std::string_view url, const MediaLimits& limits, const std::string& param, std::string* bytes) {
  DataUri uri;
  if (ParseDataUri(url, &uri)) {
    if (uri.mime.substr(0, 6) != "image/")
      return InvalidRequest(param, "an image data URI must have an image/* type, got '" + std::string(uri.mime) + "'");
    return DecodePayload(uri.payload, limits, param, bytes);
  }
  if (url.substr(0, 7) == "file://") return ReadLocalFile(url, limits, param, bytes);
  if (url.substr(0, 7) == "http://" || url.substr(0, 8) == "https://")
    return InvalidRequest(param, "remote image URLs are not fetched by this server; send the image inline as "
                                 "data:image/<type>;base64,<data>", "remote_media_disabled");
  return InvalidRequest(param, "the image URL must be data:image/<type>;base64,<data> (or file:// under the "
                               "server's --media-dir)");
}

// The bytes behind an audio URL.
ApiError AudioUrlBytes(std::string_view url, const MediaLimits& limits, const std::string& param, std::string* bytes) {
  DataUri uri;
  if (ParseDataUri(url, &uri)) {
    if (uri.mime.substr(0, 6) != "audio/")
      return InvalidRequest(param, "an audio data URI must have an audio/* type, got '" + std::string(uri.mime) + "'");
    return DecodePayload(uri.payload, limits, param, bytes);
  }
  if (url.substr(0, 7) == "file://") return ReadLocalFile(url, limits, param, bytes);
  return InvalidRequest(param, "the audio URL must be data:audio/<type>;base64,<data> (or file:// under the "
                               "server's --media-dir); remote URLs are not fetched", "remote_media_disabled");
}

}  // namespace

ApiError ImageError(const Status& st, const std::string& param) {
  const bool too_big = st.message().find("more than the limit of") != std::string::npos && st.code() != StatusCode::kDataLoss;
  return InvalidRequest(param, st.message() + (too_big ? " (--max-image-pixels)" : ""),
                        too_big ? "image_too_large" : "invalid_image");
}

ApiError AudioError(const Status& st, const std::string& param) {
  const bool too_long = st.code() == StatusCode::kOutOfRange;
  return InvalidRequest(param, st.message() + (too_long ? " (--max-audio-seconds)" : ""),
                        too_long ? "audio_too_long" : "invalid_audio");
}

ApiError MediaBytes(const MediaSource& source, const MediaLimits& limits, std::string* out) {
  if (source.uploaded) {
    if (static_cast<int64_t>(source.data.size()) > limits.max_media_bytes)
      return TooLarge(source.param, static_cast<int64_t>(source.data.size()), limits);
    if (source.data.empty()) return InvalidRequest(source.param, "the uploaded file is empty");
    *out = source.data;
    return {};
  }
  if (source.kind == MediaSource::kImage) return ImageUrlBytes(source.url, limits, source.param, out);
  if (source.inline_data) return DecodePayload(source.data, limits, source.param + ".data", out);
  return AudioUrlBytes(source.url, limits, source.param, out);
}

bool Base64Decode(std::string_view in, std::string* out) {
  static const std::array<int8_t, 256> table = [] {
    std::array<int8_t, 256> t = B64Table();
    t[static_cast<uint8_t>('-')] = 62;  // the URL-safe alphabet (RFC 4648 section 5)
    t[static_cast<uint8_t>('_')] = 63;
    return t;
  }();
  auto space = [](char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; };
  // Line breaks and spaces (MIME-wrapped base64) are skipped; '=' may only end the data.
  size_t end = in.size();
  while (end > 0 && space(in[end - 1])) --end;
  size_t pad = 0;
  while (end > 0 && (in[end - 1] == '=' || space(in[end - 1]))) {
    if (in[end - 1] == '=') ++pad;
    --end;
  }
  if (pad > 2) return false;
  out->clear();
  out->reserve(end / 4 * 3 + 3);
  uint32_t acc = 0;
  int bits = 0;
  size_t symbols = 0;
  for (size_t i = 0; i < end; ++i) {
    if (space(in[i])) continue;
    const int8_t v = table[static_cast<uint8_t>(in[i])];
    if (v < 0) return false;
    ++symbols;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out->push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  if (symbols % 4 == 1) return false;
  if (pad > 0 && (symbols + pad) % 4 != 0) return false;
  return true;
}

std::string Base64Encode(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out.push_back(kB64[(v >> s) & 63]);
  }
  if (i < in.size()) {
    uint32_t v = uint8_t(in[i]) << 16;
    if (i + 1 < in.size()) v |= uint8_t(in[i + 1]) << 8;
    out.push_back(kB64[(v >> 18) & 63]);
    out.push_back(kB64[(v >> 12) & 63]);
    out.push_back(i + 1 < in.size() ? kB64[(v >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

ApiError CheckAudioFormat(std::string_view format, const std::string& param) {
  static constexpr std::array<std::string_view, 5> kFormats = {"wav", "mp3", "flac", "ogg", "oga"};
  if (!format.empty() && std::find(kFormats.begin(), kFormats.end(), format) == kFormats.end())
    return InvalidRequest(param + ".format",
                          "audio format '" + std::string(format) + "' is not supported; use wav, mp3, flac or ogg",
                          "unsupported_audio_format");
  return {};
}

}  // namespace phi4mm::server
