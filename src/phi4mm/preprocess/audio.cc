// Audio decoding with libsndfile (WAV 8/16/24/32-bit PCM and float, FLAC, OGG/Vorbis, MP3 where the
// linked libsndfile has MPEG support). Samples are read as double exactly as soundfile.read does
// (sf_readf_double, libsndfile's normalisation), channels are averaged in double as the original
// processor's `wav.mean(1)` does (reference-spec §4.1), and the mono result is stored as float32,
// the precision the original frames it in. Bad input is reported, never truncated or patched.
#include "phi4mm/preprocess/audio.h"

#include <sndfile.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "phi4mm/preprocess/audio_limits.h"

namespace phi4mm {
namespace {

// sf_open_virtual callbacks over an in-memory byte span.
struct MemoryFile {
  std::span<const uint8_t> bytes;
  sf_count_t pos = 0;
};

sf_count_t MemLength(void* user) { return static_cast<sf_count_t>(static_cast<MemoryFile*>(user)->bytes.size()); }

sf_count_t MemSeek(sf_count_t offset, int whence, void* user) {
  auto* f = static_cast<MemoryFile*>(user);
  const sf_count_t size = static_cast<sf_count_t>(f->bytes.size());
  sf_count_t base = 0;
  if (whence == SEEK_CUR) base = f->pos;
  if (whence == SEEK_END) base = size;
  const sf_count_t target = base + offset;
  if (target < 0) return -1;
  f->pos = target;
  return f->pos;
}

sf_count_t MemRead(void* ptr, sf_count_t count, void* user) {
  auto* f = static_cast<MemoryFile*>(user);
  const sf_count_t size = static_cast<sf_count_t>(f->bytes.size());
  if (count <= 0 || f->pos >= size) return 0;
  const sf_count_t n = std::min(count, size - f->pos);
  std::memcpy(ptr, f->bytes.data() + f->pos, static_cast<size_t>(n));
  f->pos += n;
  return n;
}

sf_count_t MemWrite(const void*, sf_count_t, void*) { return 0; }
sf_count_t MemTell(void* user) { return static_cast<MemoryFile*>(user)->pos; }

struct SndfileCloser {
  void operator()(SNDFILE* s) const { sf_close(s); }
};
using SndfilePtr = std::unique_ptr<SNDFILE, SndfileCloser>;

std::string LogOf(SNDFILE* snd) {
  std::string log(8192, '\0');
  const int n = sf_command(snd, SFC_GET_LOG_INFO, log.data(), static_cast<int>(log.size()));
  log.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return log;
}

// libsndfile shrinks the data chunk of a truncated WAV/AIFF to what the file holds and logs the
// declared size: "data : 32000 (should be 15978)" (WAV) or "SSND : ..." (AIFF). A shortened file must
// not pass as a shorter clip. Sizes 0 and >= 0xFFFFFFF0 are the placeholders streaming writers
// leave in the header, not truncation. Other "should be" notes (odd chunk sizes) are harmless.
bool IsTruncated(const std::string& log) {
  size_t pos = 0;
  while (pos < log.size()) {
    size_t end = log.find('\n', pos);
    if (end == std::string::npos) end = log.size();
    std::string line = log.substr(pos, end - pos);
    pos = end + 1;
    const size_t start = line.find_first_not_of(' ');
    if (start == std::string::npos) continue;
    line = line.substr(start);
    if ((line.rfind("data :", 0) != 0 && line.rfind("SSND :", 0) != 0) ||
        line.find("(should be") == std::string::npos) {
      continue;
    }
    const unsigned long long declared = std::strtoull(line.c_str() + 6, nullptr, 10);
    if (declared != 0 && declared < 0xFFFFFFF0ull) return true;
  }
  return false;
}

Status TooLong(const std::string& label, int64_t max_seconds) {
  return OutOfRange(label + ": the audio is longer than " + std::to_string(max_seconds) + " s" +
                    (max_seconds == kMaxAudioSeconds ? ", more than the model's 131072-token context can hold"
                                                     : ", the limit for this request") +
                    "; split it into shorter clips");
}

bool KnownLength(const SF_INFO& info) { return info.frames > 0 && info.frames != SF_COUNT_MAX; }

// What an opened file's header says, checked before any sample is decoded: its rate, its channel
// count, truncation, and its length when the header gives one (a multi-hour clip is refused without
// reading it). `max_seconds` comes back clamped to the supported range.
Status CheckHeader(SNDFILE* snd, const SF_INFO& info, const std::string& label, int64_t* max_seconds) {
  if (info.samplerate < kMinAudioSampleRate || info.samplerate > kMaxAudioSampleRate) {
    return InvalidArgument(label + ": sample rate " + std::to_string(info.samplerate) +
                           " Hz is outside the supported range " + std::to_string(kMinAudioSampleRate) + "-" +
                           std::to_string(kMaxAudioSampleRate) + " Hz; convert the file (e.g. `sox " + "in -r 16000 out.wav`)");
  }
  if (info.channels <= 0 || info.channels > 64) {
    return InvalidArgument(label + ": " + std::to_string(info.channels) + " channels is not a valid channel count");
  }
  if (IsTruncated(LogOf(snd))) {
    return DataLoss(label + ": the audio file is truncated: its header declares more audio data than the file "
                    "holds (re-export or re-download the file)");
  }
  *max_seconds = std::clamp<int64_t>(*max_seconds, 1, kMaxAudioSeconds);
  if (KnownLength(info) && info.frames > *max_seconds * info.samplerate) return TooLong(label, *max_seconds);
  return Status::Ok();
}

// Reads every frame of an opened file, averages channels in double and checks the limits.
Result<AudioClip> ReadAll(SNDFILE* snd, const SF_INFO& info, const std::string& label, int64_t max_seconds) {
  PHI4MM_RETURN_IF_ERROR(CheckHeader(snd, info, label, &max_seconds));
  const int64_t max_frames = max_seconds * info.samplerate;
  // The count of decoded frames is checked as well, for headers that lie.
  const auto too_long = [&] { return TooLong(label, max_seconds); };
  const int64_t channels = info.channels;
  AudioClip clip;
  clip.sample_rate = info.samplerate;
  if (info.frames > 0 && info.frames <= max_frames) clip.samples.reserve(static_cast<size_t>(info.frames));
  // libsndfile 1.2.0's MPEG reader gives results that depend on the read size (reads of 576-1152
  // frames corrupt whole MP3 frames; 4608-16384 still change boundary samples by ~6e-8), while
  // one read of the whole stream equals soundfile.read. So MP3 is read in one call when the header
  // gives its length (up to 8M samples per call); other formats stream in 16384-frame chunks.
  sf_count_t chunk = 16384;
  if ((info.format & SF_FORMAT_TYPEMASK) == SF_FORMAT_MPEG) {
    chunk = std::clamp<sf_count_t>(info.frames, 16384, (sf_count_t{1} << 23) / channels);
  }
  const sf_count_t kChunk = chunk;
  // soundfile.read seeks to the start (sf_seek(0, SEEK_SET), _prepare_read) before reading; for
  // MP3 this re-primes libsndfile's decoder and changes decoded values by a few float ulps. Do the
  // same so the samples equal what the reference reads.
  if (info.seekable) sf_seek(snd, 0, SEEK_SET);
  std::vector<double> buf(static_cast<size_t>(kChunk * channels));
  for (;;) {
    const sf_count_t got = sf_readf_double(snd, buf.data(), kChunk);
    if (got <= 0) break;
    for (sf_count_t i = 0; i < got; ++i) {
      const double* frame = buf.data() + i * channels;
      double v = frame[0];
      if (channels > 1) {
        double sum = 0.0;
        for (int64_t c = 0; c < channels; ++c) sum += frame[c];
        v = sum / static_cast<double>(channels);
      }
      if (!std::isfinite(v)) {
        return InvalidArgument(label + ": sample " + std::to_string(clip.samples.size()) + " is " +
                               (std::isnan(v) ? "NaN" : "infinite") +
                               "; the (float) audio file holds non-finite values and cannot be used");
      }
      clip.samples.push_back(static_cast<float>(v));
    }
    if (static_cast<int64_t>(clip.samples.size()) > max_frames) return too_long();
  }
  if (sf_error(snd) != SF_ERR_NO_ERROR) {
    return DataLoss(label + ": decoding failed after " + std::to_string(clip.samples.size()) +
                    " samples: " + sf_strerror(snd) + " (the file is corrupt or truncated)");
  }
  if (info.frames > 0 && info.frames != SF_COUNT_MAX && static_cast<int64_t>(clip.samples.size()) < info.frames) {
    return DataLoss(label + ": the header declares " + std::to_string(info.frames) + " frames but only " +
                    std::to_string(clip.samples.size()) + " could be decoded (the file is truncated)");
  }
  if (clip.samples.empty()) {
    return InvalidArgument(label + ": the audio file contains no samples");
  }
  return clip;
}

Status OpenError(SNDFILE* null_handle, const std::string& label) {
  return DataLoss(label + ": not a readable audio file (" + sf_strerror(null_handle) +
                  "); supported: WAV (PCM 8/16/24/32-bit, float), FLAC, OGG/Vorbis, MP3");
}

}  // namespace

namespace {

// Opens in-memory bytes with libsndfile; `mem` must outlive the handle.
Result<SndfilePtr> OpenBytes(std::span<const uint8_t> bytes, const std::string& label, MemoryFile* mem,
                             SF_INFO* info) {
  if (bytes.empty()) return InvalidArgument(label + ": the audio data is empty (0 bytes)");
  *mem = MemoryFile{bytes, 0};
  SF_VIRTUAL_IO io{MemLength, MemSeek, MemRead, MemWrite, MemTell};
  SndfilePtr snd(sf_open_virtual(&io, SFM_READ, info, mem));
  if (!snd) return OpenError(nullptr, label);
  return snd;
}

}  // namespace

Result<AudioClip> DecodeAudioBytes(std::span<const uint8_t> bytes, const std::string& label, int64_t max_seconds) {
  MemoryFile mem;
  SF_INFO info{};
  PHI4MM_ASSIGN_OR_RETURN(SndfilePtr snd, OpenBytes(bytes, label, &mem, &info));
  return ReadAll(snd.get(), info, label, max_seconds);
}

Result<AudioInfo> ReadAudioInfo(std::span<const uint8_t> bytes, const std::string& label, int64_t max_seconds) {
  MemoryFile mem;
  SF_INFO info{};
  PHI4MM_ASSIGN_OR_RETURN(SndfilePtr snd, OpenBytes(bytes, label, &mem, &info));
  PHI4MM_RETURN_IF_ERROR(CheckHeader(snd.get(), info, label, &max_seconds));
  return AudioInfo{info.samplerate, KnownLength(info) ? info.frames : 0};
}

Result<AudioClip> DecodeAudioFile(const std::string& path, int64_t max_seconds) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return NotFound(path + ": no such audio file");
  }
  if (std::filesystem::file_size(path, ec) == 0 && !ec) {
    return InvalidArgument(path + ": the audio file is empty (0 bytes)");
  }
  SF_INFO info{};
  SndfilePtr snd(sf_open(path.c_str(), SFM_READ, &info));
  if (!snd) return OpenError(nullptr, path);
  return ReadAll(snd.get(), info, path, max_seconds);
}

}  // namespace phi4mm
