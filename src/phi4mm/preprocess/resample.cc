// scipy.signal.resample_poly re-implemented: firwin with a Kaiser window (reference-spec §4.1) and
// a direct upfirdn evaluation of only the output samples resample_poly keeps.
#include "phi4mm/preprocess/resample.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <numeric>
#include <string>

namespace phi4mm {
namespace {

// Modified Bessel function of the first kind, order 0, by its power series (converges for all
// arguments used here, |x| <= 5, to double precision).
double BesselI0(double x) {
  const double q = x * x / 4.0;
  double term = 1.0;
  double sum = 1.0;
  for (int k = 1; k < 200; ++k) {
    term *= q / (static_cast<double>(k) * static_cast<double>(k));
    sum += term;
    if (term < sum * 1e-18) break;
  }
  return sum;
}

double Sinc(double x) {
  if (x == 0.0) return 1.0;
  const double px = std::numbers::pi * x;
  return std::sin(px) / px;
}

}  // namespace

// Mirrors scipy.signal.firwin (one pass band [0, cutoff]) times scipy.signal.windows.kaiser(M,
// beta, sym=True), then the scale=True normalisation to unit gain at DC.
std::vector<double> KaiserLowpass(int64_t num_taps, double cutoff, double beta) {
  std::vector<double> h(static_cast<size_t>(num_taps));
  const double alpha = 0.5 * static_cast<double>(num_taps - 1);
  const double i0_beta = BesselI0(beta);
  double sum = 0.0;
  for (int64_t i = 0; i < num_taps; ++i) {
    const double m = static_cast<double>(i) - alpha;
    const double r = m / alpha;
    const double w = BesselI0(beta * std::sqrt(std::max(0.0, 1.0 - r * r))) / i0_beta;
    h[static_cast<size_t>(i)] = cutoff * Sinc(cutoff * m) * w;
    sum += h[static_cast<size_t>(i)];
  }
  for (double& v : h) v /= sum;
  return h;
}

// Mirrors scipy.signal.resample_poly: h = firwin(2*half_len+1, 1/max_rate) * up, padded in front
// with n_pre_pad zeros; y = upfirdn(h, x, up, down)[n_pre_remove : n_pre_remove + n_out].
Result<std::vector<double>> ResamplePoly(std::span<const float> x, int64_t up, int64_t down) {
  if (up <= 0 || down <= 0) {
    return InvalidArgument("resampling ratio " + std::to_string(up) + "/" + std::to_string(down) +
                           " must be positive");
  }
  const int64_t g = std::gcd(up, down);
  up /= g;
  down /= g;
  const int64_t n_in = static_cast<int64_t>(x.size());
  if (up == 1 && down == 1) return std::vector<double>(x.begin(), x.end());
  const int64_t n_out = (n_in * up) / down + ((n_in * up) % down != 0 ? 1 : 0);
  const int64_t max_rate = std::max(up, down);
  const int64_t half_len = 10 * max_rate;
  std::vector<double> taps = KaiserLowpass(2 * half_len + 1, 1.0 / static_cast<double>(max_rate), 5.0);
  const int64_t n_pre_pad = down - half_len % down;
  const int64_t n_pre_remove = (half_len + n_pre_pad) / down;
  // h: [n_pre_pad zeros, taps * up]; trailing zero padding only extends upfirdn's output with
  // zeros, which evaluating each kept sample directly below reproduces.
  std::vector<double> h(static_cast<size_t>(n_pre_pad), 0.0);
  h.reserve(h.size() + taps.size());
  for (double t : taps) h.push_back(t * static_cast<double>(up));
  const int64_t len_h = static_cast<int64_t>(h.size());

  std::vector<double> y(static_cast<size_t>(n_out), 0.0);
  for (int64_t i = 0; i < n_out; ++i) {
    // Output sample i is upfirdn's sample (i + n_pre_remove): position p = that * down on the
    // upsampled grid; sum over input m with 0 <= p - m*up < len_h of h[p - m*up] * x[m].
    const int64_t p = (i + n_pre_remove) * down;
    int64_t m_hi = p / up;
    if (m_hi > n_in - 1) m_hi = n_in - 1;
    int64_t m_lo = p - (len_h - 1) <= 0 ? 0 : (p - (len_h - 1) + up - 1) / up;
    double acc = 0.0;
    for (int64_t m = m_lo; m <= m_hi; ++m) {
      acc += h[static_cast<size_t>(p - m * up)] * static_cast<double>(x[static_cast<size_t>(m)]);
    }
    y[static_cast<size_t>(i)] = acc;
  }
  return y;
}

}  // namespace phi4mm
