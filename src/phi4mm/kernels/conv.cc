// Channels-last convolution kernels (see conv.h): portable scalar loops, threads split the output
// rows.
#include "phi4mm/kernels/conv.h"

#include <vector>

namespace phi4mm {

void Conv2d3x3Stride2(const float* x, int64_t h, int64_t w, int64_t cin, const float* weight, const float* bias,
                      int64_t cout, float* out, ThreadPool* pool) {
  const int64_t ho = Stride2Length(h), wo = Stride2Length(w);
  // Repack the weight to [a, b, c, o] so the innermost loop runs over contiguous output channels.
  std::vector<float> wt(static_cast<size_t>(9 * cin * cout));
  for (int64_t o = 0; o < cout; ++o)
    for (int64_t c = 0; c < cin; ++c)
      for (int64_t ab = 0; ab < 9; ++ab) wt[(ab * cin + c) * cout + o] = weight[(o * cin + c) * 9 + ab];
  auto rows = [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      for (int64_t j = 0; j < wo; ++j) {
        float* y = out + (i * wo + j) * cout;
        for (int64_t o = 0; o < cout; ++o) y[o] = bias ? bias[o] : 0.0f;
        for (int64_t a = 0; a < 3; ++a) {
          const int64_t r = 2 * i - 1 + a;
          if (r < 0 || r >= h) continue;
          for (int64_t b = 0; b < 3; ++b) {
            const int64_t s = 2 * j - 1 + b;
            if (s < 0 || s >= w) continue;
            const float* xv = x + (r * w + s) * cin;
            const float* wv = wt.data() + (a * 3 + b) * cin * cout;
            for (int64_t c = 0; c < cin; ++c) {
              const float xc = xv[c];
              const float* wc = wv + c * cout;
              for (int64_t o = 0; o < cout; ++o) y[o] += wc[o] * xc;
            }
          }
        }
      }
    }
  };
  if (pool) pool->ParallelFor(ho, rows);
  else rows(0, ho);
}

void DepthwiseConv2d3x3Stride2(const float* x, int64_t h, int64_t w, int64_t c, const float* weight,
                               const float* bias, float* out, ThreadPool* pool) {
  const int64_t ho = Stride2Length(h), wo = Stride2Length(w);
  std::vector<float> wt(static_cast<size_t>(9 * c));  // [a, b, c]
  for (int64_t ch = 0; ch < c; ++ch)
    for (int64_t ab = 0; ab < 9; ++ab) wt[ab * c + ch] = weight[ch * 9 + ab];
  auto rows = [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      for (int64_t j = 0; j < wo; ++j) {
        float* y = out + (i * wo + j) * c;
        for (int64_t ch = 0; ch < c; ++ch) y[ch] = bias ? bias[ch] : 0.0f;
        for (int64_t a = 0; a < 3; ++a) {
          const int64_t r = 2 * i - 1 + a;
          if (r < 0 || r >= h) continue;
          for (int64_t b = 0; b < 3; ++b) {
            const int64_t s = 2 * j - 1 + b;
            if (s < 0 || s >= w) continue;
            const float* xv = x + (r * w + s) * c;
            const float* wv = wt.data() + (a * 3 + b) * c;
            for (int64_t ch = 0; ch < c; ++ch) y[ch] += wv[ch] * xv[ch];
          }
        }
      }
    }
  };
  if (pool) pool->ParallelFor(ho, rows);
  else rows(0, ho);
}

void CausalDepthwiseConv1d(const float* x, int64_t t, int64_t c, const float* weight, int64_t k, const float* bias,
                           float* out, ThreadPool* pool) {
  std::vector<float> wt(static_cast<size_t>(k * c));  // [j, c]
  for (int64_t ch = 0; ch < c; ++ch)
    for (int64_t j = 0; j < k; ++j) wt[j * c + ch] = weight[ch * k + j];
  auto rows = [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      float* y = out + i * c;
      for (int64_t ch = 0; ch < c; ++ch) y[ch] = bias ? bias[ch] : 0.0f;
      for (int64_t j = 0; j < k; ++j) {
        const int64_t src = i - (k - 1) + j;
        if (src < 0) continue;
        const float* xv = x + src * c;
        const float* wv = wt.data() + j * c;
        for (int64_t ch = 0; ch < c; ++ch) y[ch] += wv[ch] * xv[ch];
      }
    }
  };
  if (pool) pool->ParallelFor(t, rows);
  else rows(0, t);
}

}  // namespace phi4mm
