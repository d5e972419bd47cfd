// A small radix-2 FFT in double precision, used by the audio feature extractor for the 512-point
// (16 kHz) and 256-point (8 kHz) real transforms of reference-spec §4.2. It computes what
// numpy.fft.rfft(x, n) computes (zero padding to n, 1 + n/2 complex bins); values agree with
// numpy's pocketfft to double rounding, far below the float32 cast that follows.
#pragma once

#include <complex>
#include <cstddef>
#include <span>
#include <vector>

#include "phi4mm/base/status.h"

namespace phi4mm {

class RealFft {
 public:
  // n must be a power of two, >= 2.
  static Result<RealFft> Create(size_t n);

  size_t size() const { return n_; }
  size_t num_bins() const { return n_ / 2 + 1; }

  // out[k] = sum_j x[j] exp(-2 pi i j k / n), k in [0, n/2]; x shorter than n is zero-padded
  // (x longer than n is an error the caller must avoid: only the first n values are used).
  void Forward(std::span<const double> x, std::span<std::complex<double>> out) const;

 private:
  RealFft() = default;
  size_t n_ = 0;
  std::vector<std::complex<double>> twiddle_;  // [n/2]: exp(-2 pi i k / n)
  std::vector<size_t> bitrev_;                 // [n]
  mutable std::vector<std::complex<double>> work_;
};

}  // namespace phi4mm
