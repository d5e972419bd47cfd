// SpeechLib mel bank construction, mirroring processing_phi4mm.speechlib_mel line for line.
#include "phi4mm/preprocess/mel.h"

#include <algorithm>
#include <cmath>

namespace phi4mm {

// speechlib_mel: matrix[m, k] = 1 - |center_m - bin2mel(k)| / ms for left_m < bin2mel(k) <
// right_m and k in [klo, khi); centres are linspace(mel(fmin), mel(fmax), n_mels + 2).
MelBank SpeechLibMel(int64_t sample_rate, int64_t n_fft, int64_t n_mels, double fmin, double fmax) {
  const double sr = static_cast<double>(sample_rate);
  const double nfft = static_cast<double>(n_fft);
  auto mel = [](double f) { return 1127.0 * std::log(1.0 + f / 700.0); };
  auto bin2mel = [&](int64_t k) { return 1127.0 * std::log(1.0 + static_cast<double>(k) * sr / (nfft * 700.0)); };
  auto f2bin = [&](double f) { return static_cast<int64_t>((f * nfft / sr) + 0.5); };

  MelBank bank;
  bank.num_bins = n_fft / 2 + 1;
  bank.num_mel = n_mels;
  bank.weights.assign(static_cast<size_t>(bank.num_bins * n_mels), 0.0f);
  const int64_t klo = f2bin(fmin) + 1;
  const int64_t khi = std::max(f2bin(fmax), klo);
  const double mlo = mel(fmin);
  const double mhi = mel(fmax);
  // numpy.linspace(mlo, mhi, n): start + i * step, with the last point set to stop exactly.
  const int64_t n_centers = n_mels + 2;
  const double step = (mhi - mlo) / static_cast<double>(n_centers - 1);
  std::vector<double> centers(static_cast<size_t>(n_centers));
  for (int64_t i = 0; i < n_centers; ++i) centers[static_cast<size_t>(i)] = mlo + static_cast<double>(i) * step;
  centers.back() = mhi;
  const double ms = (mhi - mlo) / static_cast<double>(n_mels + 1);
  for (int64_t m = 0; m < n_mels; ++m) {
    const double left = centers[static_cast<size_t>(m)];
    const double center = centers[static_cast<size_t>(m + 1)];
    const double right = centers[static_cast<size_t>(m + 2)];
    for (int64_t k = klo; k < khi; ++k) {
      const double mb = bin2mel(k);
      if (left < mb && mb < right) {
        bank.weights[static_cast<size_t>(k * n_mels + m)] = static_cast<float>(1.0 - std::abs(center - mb) / ms);
      }
    }
  }
  return bank;
}

const MelBank& Phi4MMMelBank() {
  static const MelBank bank = SpeechLibMel(16000, 512, 80, 0.0, 7690.0);
  return bank;
}

}  // namespace phi4mm
