// The SpeechLib mel filter bank of Microsoft's processing_phi4mm.speechlib_mel (reference-spec
// §4.2): 80 triangles in kaldi mel space (mel(f) = 1127 ln(1 + f/700)) between 0 and 7690 Hz over
// the 257 bins of a 512-point FFT at 16 kHz, computed in double and stored as float32 like the
// original. Only bins [f2bin(fmin)+1, f2bin(fmax)) are filled, so bin 246 of filter 79 is 0 here
// where transformers' mel_filter_bank port has ~0.00972 (see docs/reference-deviations.md).
#pragma once

#include <cstdint>
#include <vector>

namespace phi4mm {

struct MelBank {
  int64_t num_bins = 0;  // 1 + n_fft/2
  int64_t num_mel = 0;
  std::vector<float> weights;  // [num_bins, num_mel] (the original's speechlib_mel(...).T)
};

// speechlib_mel(sample_rate, n_fft, n_mels, fmin, fmax).T
MelBank SpeechLibMel(int64_t sample_rate, int64_t n_fft, int64_t n_mels, double fmin, double fmax);

// The bank the feature extractor uses: SpeechLibMel(16000, 512, 80, 0, 7690), built once.
const MelBank& Phi4MMMelBank();

}  // namespace phi4mm
