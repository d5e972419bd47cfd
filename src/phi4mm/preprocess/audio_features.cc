// Log-mel features and the audio token count, mirroring Microsoft's original
// Phi4MMAudioFeatureExtractor (_extract_spectrogram, _extract_features, _compute_audio_embed_size;
// reference-spec §4) including its float32/float64 choices, so features match it to ~1e-6:
// frames are float32, pre-emphasis and the x32768 scale are float32, window * frame and the FFT are
// float64, the spectrum is cast to complex64, |S| and |S|^2 are float32, the mel product and the
// log are float32 (the product is accumulated in double here, which is within float rounding of
// the BLAS sgemm the original calls). Where the original's sample-rate handling is wrong (integer
// division of the rate) this follows the intent instead: see docs/reference-deviations.md, Audio.
#include "phi4mm/preprocess/audio_features.h"

#include <algorithm>
#include <cmath>
#include <complex>
#include <numbers>
#include <string>

#include "phi4mm/preprocess/audio_limits.h"
#include "phi4mm/preprocess/fft.h"
#include "phi4mm/preprocess/mel.h"
#include "phi4mm/preprocess/resample.h"

namespace phi4mm {
namespace {

// numpy.hamming(M): n = arange(1-M, M, 2); 0.54 + 0.46 cos(pi n / (M-1)) (the symmetric window).
std::vector<double> NumpyHamming(int64_t m) {
  std::vector<double> w(static_cast<size_t>(m));
  const double denom = static_cast<double>(m - 1);
  for (int64_t i = 0; i < m; ++i) {
    const double n = static_cast<double>(1 - m + 2 * i);
    w[static_cast<size_t>(i)] = 0.54 + 0.46 * std::cos(std::numbers::pi * n / denom);
  }
  return w;
}

struct FrameSpec {
  int64_t win;
  int64_t hop;
  int64_t n_fft;
};

// The original's _extract_spectrogram followed by _extract_features on float32 samples `wav` at
// 16 kHz (eight_k = false) or 8 kHz with the "fillzero" method (eight_k = true).
// wav: [N] -> log_mel: [T, 80], T = (N - win) // hop + 1.
Result<AudioFeatures> LogMel(std::span<const float> wav, bool eight_k) {
  const FrameSpec fs = eight_k ? FrameSpec{200, 80, 256} : FrameSpec{400, 160, 512};
  const int64_t n = static_cast<int64_t>(wav.size());
  if (n < fs.win) {
    return InvalidArgument("the audio has " + std::to_string(n) + " samples at " + (eight_k ? "8" : "16") +
                           " kHz, shorter than one 25 ms analysis frame (" + std::to_string(fs.win) +
                           " samples); give at least 25 ms of audio");
  }
  const int64_t frames = (n - fs.win) / fs.hop + 1;
  PHI4MM_ASSIGN_OR_RETURN(RealFft fft, RealFft::Create(static_cast<size_t>(fs.n_fft)));
  const std::vector<double> window = NumpyHamming(fs.win);
  const MelBank& mel = Phi4MMMelBank();  // [257, 80]
  const int64_t nb = mel.num_bins;
  const int64_t nm = mel.num_mel;

  AudioFeatures out;
  out.frames = frames;
  out.num_mel = nm;
  out.log_mel.resize(static_cast<size_t>(frames * nm));
  std::vector<double> x(static_cast<size_t>(fs.win));
  std::vector<std::complex<double>> spec(fft.num_bins());
  std::vector<float> power(static_cast<size_t>(nb));
  const float pre = static_cast<float>(0.97);
  for (int64_t t = 0; t < frames; ++t) {
    const float* f = wav.data() + t * fs.hop;
    // y_frames_prev = roll(frame, 1) with prev[0] = prev[1]:  y = (frame - 0.97 * prev) * 32768.
    for (int64_t i = 0; i < fs.win; ++i) {
      const float prev = i == 0 ? f[0] : f[i - 1];
      const float y = (f[i] - pre * prev) * 32768.0f;
      x[static_cast<size_t>(i)] = window[static_cast<size_t>(i)] * static_cast<double>(y);
    }
    fft.Forward(x, spec);  // rfft(fft_window * y, n=n_fft) in float64
    if (!eight_k) {
      // .astype(complex64); np.abs -> float32 (hypotf); ** 2 in float32.  power: [257]
      for (int64_t k = 0; k < nb; ++k) {
        const float re = static_cast<float>(spec[static_cast<size_t>(k)].real());
        const float im = static_cast<float>(spec[static_cast<size_t>(k)].imag());
        const float a = std::hypot(re, im);
        power[static_cast<size_t>(k)] = a * a;
      }
    } else {
      // 129 complex64 bins; concatenate(S[:, :-1], zeros(T, 129) float64) promotes to complex128,
      // so np.abs is a double hypot of the float parts, then .astype(float32).  power: [257]
      const int64_t kept = static_cast<int64_t>(fft.num_bins()) - 1;  // 128
      for (int64_t k = 0; k < nb; ++k) {
        float a = 0.0f;
        if (k < kept) {
          const double re = static_cast<float>(spec[static_cast<size_t>(k)].real());
          const double im = static_cast<float>(spec[static_cast<size_t>(k)].imag());
          a = static_cast<float>(std::hypot(re, im));
        }
        power[static_cast<size_t>(k)] = a * a;
      }
    }
    // log(clip(power @ mel, 1.0, None)) in float32.  [257] @ [257, 80] -> [80]
    float* row = out.log_mel.data() + t * nm;
    for (int64_t m = 0; m < nm; ++m) {
      double acc = 0.0;
      for (int64_t k = 0; k < nb; ++k) {
        const float w = mel.weights[static_cast<size_t>(k * nm + m)];
        if (w != 0.0f) acc += static_cast<double>(power[static_cast<size_t>(k)]) * static_cast<double>(w);
      }
      const float v = static_cast<float>(acc);
      row[m] = std::log(v < 1.0f ? 1.0f : v);
    }
  }
  return out;
}

// _compute_audio_embed_size: ceil(frames / compression_rate), then ceil(/ qformer rate), in
// integer arithmetic.
int64_t AudioEmbedSize(int64_t audio_frames, int64_t compression_rate, int64_t qformer_rate) {
  int64_t result = audio_frames / compression_rate + (audio_frames % compression_rate == 0 ? 0 : 1);
  result = result / qformer_rate + (result % qformer_rate == 0 ? 0 : 1);
  return result;
}

}  // namespace

Result<AudioFeatures> ComputeAudioFeatures(const AudioClip& clip, const AudioFeatureOptions& opts) {
  if (opts.compression_rate < 1 || opts.downsample_rate < 1) {
    return InvalidArgument("audio compression_rate (" + std::to_string(opts.compression_rate) +
                           ") and downsample_rate (" + std::to_string(opts.downsample_rate) +
                           ") must be >= 1; check audio_compression_rate / audio_downsample_rate in the config");
  }
  const int64_t sr = clip.sample_rate;
  if (sr < kMinAudioSampleRate || sr > kMaxAudioSampleRate) {
    return InvalidArgument("audio sample rate " + std::to_string(sr) + " Hz is outside the supported range " +
                           std::to_string(kMinAudioSampleRate) + "-" + std::to_string(kMaxAudioSampleRate) + " Hz");
  }
  if (clip.samples.empty()) return InvalidArgument("the audio clip has no samples");
  if (static_cast<int64_t>(clip.samples.size()) > kMaxAudioSeconds * sr) {
    return OutOfRange("the audio clip is longer than " + std::to_string(kMaxAudioSeconds) +
                      " s, more than the model's 131072-token context can hold; split it into shorter clips");
  }
  for (size_t i = 0; i < clip.samples.size(); ++i) {
    if (!std::isfinite(clip.samples[i])) {
      return InvalidArgument("audio sample " + std::to_string(i) + " is " +
                             (std::isnan(clip.samples[i]) ? "NaN" : "infinite") + "; the clip cannot be used");
    }
  }

  Result<AudioFeatures> feats = Status(Internal("unset"));
  if (sr == 16000) {
    feats = LogMel(clip.samples, /*eight_k=*/false);
  } else if (sr == 8000) {
    feats = LogMel(clip.samples, /*eight_k=*/true);  // the original's default "fillzero" path
  } else {
    // resample_poly(wav, 16000/g, sr/g): for sr a multiple of 16000 this is exactly the
    // original's resample_poly(wav, 1, sr // 16000).
    PHI4MM_ASSIGN_OR_RETURN(std::vector<double> wav16, ResamplePoly(clip.samples, 16000, sr));
    std::vector<float> as_f32(wav16.begin(), wav16.end());  // the original frames in float32
    feats = LogMel(as_f32, /*eight_k=*/false);
  }
  if (!feats.ok()) return feats.status();
  AudioFeatures out = std::move(feats).value();
  // Float files may hold any finite value; samples beyond ~1e11 overflow the float32 power
  // spectrum to inf, as they would in the original. Refuse rather than hand inf to the encoder.
  for (float v : out.log_mel) {
    if (!std::isfinite(v)) {
      float peak = 0.0f;
      for (float s : clip.samples) peak = std::max(peak, std::abs(s));
      return InvalidArgument("the audio's amplitude (peak |sample| = " + std::to_string(peak) +
                             ") overflows the float32 spectrum; audio samples should lie in [-1, 1], so "
                             "normalise the file");
    }
  }
  // audio_frames = len(features) * audio_feat_stride (1 for this checkpoint).
  out.num_tokens = AudioEmbedSize(out.frames, opts.compression_rate, opts.downsample_rate);
  return out;
}

}  // namespace phi4mm
