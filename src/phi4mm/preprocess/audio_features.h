// The Phi-4-multimodal audio feature extractor (reference: Microsoft's Phi4MMAudioFeatureExtractor
// and transformers' Phi4MultimodalFeatureExtractor, reference-spec §4): resampling to 16 kHz (8 kHz
// handled as the original does), framing, pre-emphasis, Hamming window, 512-point FFT, the 80-band
// SpeechLib mel bank, the log floor, and the number of audio placeholder tokens.
#pragma once

#include <cstdint>
#include <vector>

#include "phi4mm/base/status.h"
#include "phi4mm/preprocess/audio.h"

namespace phi4mm {

struct AudioFeatureOptions {
  int64_t compression_rate = 8;  // audio_compression_rate
  int64_t downsample_rate = 1;   // audio_downsample_rate (qformer)
};

struct AudioFeatures {
  int64_t frames = 0;
  int64_t num_mel = 80;
  std::vector<float> log_mel;  // [frames, num_mel]
  int64_t num_tokens = 0;      // placeholder tokens this clip takes in the prompt
};

Result<AudioFeatures> ComputeAudioFeatures(const AudioClip& clip, const AudioFeatureOptions& opts = {});

}  // namespace phi4mm
