// Decoded audio: mono float samples in [-1, 1] at the file's sample rate, from WAV (8/16/24/32-bit
// PCM and float), FLAC, OGG/Vorbis and MP3 where libsndfile reads them. Channels are averaged to
// mono as the reference does. Nothing is truncated.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "phi4mm/base/status.h"
#include "phi4mm/preprocess/audio_limits.h"

namespace phi4mm {

struct AudioClip {
  int64_t sample_rate = 0;
  std::vector<float> samples;  // mono
};

// `max_seconds` (at most kMaxAudioSeconds, audio_limits.h) refuses longer clips with OutOfRange,
// from the header's length before decoding when the header gives one.
Result<AudioClip> DecodeAudioFile(const std::string& path, int64_t max_seconds = kMaxAudioSeconds);
Result<AudioClip> DecodeAudioBytes(std::span<const uint8_t> bytes, const std::string& label,
                                   int64_t max_seconds = kMaxAudioSeconds);

// What an audio file's header declares, without decoding a sample: its sample rate and, when the
// header gives it (WAV, FLAC, OGG; not every MP3), its length in frames (0 when unknown). The same
// open and limit errors as DecodeAudioBytes.
struct AudioInfo {
  int64_t sample_rate = 0;
  int64_t frames = 0;
};
Result<AudioInfo> ReadAudioInfo(std::span<const uint8_t> bytes, const std::string& label,
                                int64_t max_seconds = kMaxAudioSeconds);

}  // namespace phi4mm
