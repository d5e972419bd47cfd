// Iterative radix-2 decimation-in-time FFT (bit-reversal permutation, then log2(n) butterfly
// passes) over complex doubles, with twiddles computed once per size from std::cos/std::sin.
#include "phi4mm/preprocess/fft.h"

#include <cmath>
#include <numbers>
#include <string>

namespace phi4mm {

Result<RealFft> RealFft::Create(size_t n) {
  if (n < 2 || (n & (n - 1)) != 0) {
    return InvalidArgument("FFT size " + std::to_string(n) + " is not a power of two >= 2");
  }
  RealFft f;
  f.n_ = n;
  f.twiddle_.resize(n / 2);
  for (size_t k = 0; k < n / 2; ++k) {
    const double a = -2.0 * std::numbers::pi * static_cast<double>(k) / static_cast<double>(n);
    f.twiddle_[k] = {std::cos(a), std::sin(a)};
  }
  size_t bits = 0;
  while ((size_t{1} << bits) < n) ++bits;
  f.bitrev_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    size_t r = 0;
    for (size_t b = 0; b < bits; ++b) r |= ((i >> b) & 1u) << (bits - 1 - b);
    f.bitrev_[i] = r;
  }
  f.work_.resize(n);
  return f;
}

void RealFft::Forward(std::span<const double> x, std::span<std::complex<double>> out) const {
  std::vector<std::complex<double>>& a = work_;
  for (size_t i = 0; i < n_; ++i) {
    const size_t src = bitrev_[i];
    a[i] = {src < x.size() ? x[src] : 0.0, 0.0};
  }
  for (size_t len = 2; len <= n_; len <<= 1) {
    const size_t half = len / 2;
    const size_t step = n_ / len;
    for (size_t start = 0; start < n_; start += len) {
      for (size_t j = 0; j < half; ++j) {
        const std::complex<double> w = twiddle_[j * step];
        const std::complex<double> u = a[start + j];
        const std::complex<double> v = a[start + j + half];
        const std::complex<double> t(w.real() * v.real() - w.imag() * v.imag(),
                                     w.real() * v.imag() + w.imag() * v.real());
        a[start + j] = u + t;
        a[start + j + half] = u - t;
      }
    }
  }
  const size_t bins = num_bins();
  for (size_t k = 0; k < bins && k < out.size(); ++k) out[k] = a[k];
}

}  // namespace phi4mm
