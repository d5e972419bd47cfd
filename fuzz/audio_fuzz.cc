// libFuzzer target for audio input: DecodeAudioBytes on arbitrary bytes (any format libsndfile
// sniffs: WAV, FLAC, OGG, MP3, ...) and, for whatever decodes, ComputeAudioFeatures. Inputs are
// capped at 256 KiB and decoded clips at 20 s of 16 kHz-equivalent work so each run stays fast.
// A crash, sanitizer report, an error without a message, or features that break their promises
// (size, finiteness, token count) are findings.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "phi4mm/preprocess/audio.h"
#include "phi4mm/preprocess/audio_features.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 256 * 1024) return 0;
  auto clip = phi4mm::DecodeAudioBytes(std::span<const uint8_t>(data, size), "fuzz audio");
  if (!clip.ok()) {
    if (clip.status().message().empty()) std::abort();
    return 0;
  }
  if (clip->samples.empty() || clip->sample_rate <= 0) std::abort();
  for (float v : clip->samples) {
    if (!std::isfinite(v)) std::abort();
  }
  // Bound the work: the feature cost grows with duration x resampling-filter length.
  if (static_cast<double>(clip->samples.size()) / static_cast<double>(clip->sample_rate) > 20.0) return 0;
  auto feats = phi4mm::ComputeAudioFeatures(*clip);
  if (!feats.ok()) {
    if (feats.status().message().empty()) std::abort();
    return 0;
  }
  if (feats->frames <= 0 || feats->num_mel != 80) std::abort();
  if (feats->log_mel.size() != static_cast<size_t>(feats->frames * feats->num_mel)) std::abort();
  if (feats->num_tokens != (feats->frames + 7) / 8) std::abort();
  for (float v : feats->log_mel) {
    if (!std::isfinite(v) || v < 0.0f) std::abort();
  }
  return 0;
}
