// Polyphase rational resampling with the same algorithm and filter as scipy.signal.resample_poly
// (the resampler of Microsoft's Phi4MMAudioFeatureExtractor._extract_spectrogram, reference-spec
// §4.1): a Kaiser-windowed (beta 5) low-pass FIR of 2*10*max(up,down)+1 taps with cutoff
// 1/max(up,down), scaled by `up`, applied by upfirdn with zero padding, keeping
// ceil(n*up/down) outputs centred on the filter. Computed in double as scipy does.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "phi4mm/base/status.h"

namespace phi4mm {

// The FIR taps scipy.signal.firwin(num_taps, cutoff, window=('kaiser', beta)) returns (pass_zero,
// scale=True; cutoff relative to Nyquist, 0 < cutoff <= 1).
std::vector<double> KaiserLowpass(int64_t num_taps, double cutoff, double beta);

// scipy.signal.resample_poly(x, up, down) for 1-D x (default window and padtype). up and down are
// reduced by their gcd first; up == down returns x unchanged. Output length ceil(len(x)*up/down).
Result<std::vector<double>> ResamplePoly(std::span<const float> x, int64_t up, int64_t down);

}  // namespace phi4mm
