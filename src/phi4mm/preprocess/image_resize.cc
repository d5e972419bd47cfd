// Resampling kernels of the image processor: Pillow's fixed-point BILINEAR resampler and torch's
// float32 bicubic interpolation, reimplemented operation by operation so that results match the
// reference bit for bit (see image_resize.h).
#include "phi4mm/preprocess/image_resize.h"

#include <algorithm>
#include <cmath>

namespace phi4mm::image_internal {
namespace {

// Pillow Resample.c: 8-bit results keep 32 - 8 - 2 = 22 fractional bits of weight.
constexpr int kPrecisionBits = 32 - 8 - 2;

// One output sample of a resampling pass: the first input index and the fixed-point weights of
// the taps that follow it.
struct Taps {
  int64_t first = 0;
  std::vector<int32_t> weights;
};

double Triangle(double x) {
  if (x < 0.0) x = -x;
  return x < 1.0 ? 1.0 - x : 0.0;
}

// Reference: Pillow Resample.c precompute_coeffs + normalize_coeffs_8bpc with the BILINEAR filter
// (support 1) and the whole image as the box. `scale = in/out`; when downscaling the filter is
// widened by `scale` (antialiasing). Weights are normalised by their sum in double, then rounded
// to 22-bit fixed point away from zero.
std::vector<Taps> PilCoefficients(int64_t in_size, int64_t out_size) {
  const double scale = static_cast<double>(static_cast<float>(in_size)) / static_cast<double>(out_size);
  const double filterscale = std::max(scale, 1.0);
  const double support = 1.0 * filterscale;
  const double ss = 1.0 / filterscale;
  std::vector<Taps> taps(static_cast<size_t>(out_size));
  std::vector<double> k;
  for (int64_t xx = 0; xx < out_size; ++xx) {
    const double center = (static_cast<double>(xx) + 0.5) * scale;
    int64_t xmin = static_cast<int64_t>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int64_t xmax = static_cast<int64_t>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    k.assign(static_cast<size_t>(std::max<int64_t>(xmax, 0)), 0.0);
    double ww = 0.0;
    for (int64_t x = 0; x < xmax; ++x) {
      const double w = Triangle((static_cast<double>(x + xmin) - center + 0.5) * ss);
      k[static_cast<size_t>(x)] = w;
      ww += w;
    }
    Taps& t = taps[static_cast<size_t>(xx)];
    t.first = xmin;
    t.weights.resize(k.size());
    for (size_t x = 0; x < k.size(); ++x) {
      const double w = ww != 0.0 ? k[x] / ww : k[x];
      const double fixed = w * static_cast<double>(1 << kPrecisionBits);
      t.weights[x] = static_cast<int32_t>(w < 0 ? -0.5 + fixed : 0.5 + fixed);
    }
  }
  return taps;
}

// Pillow clip8: the accumulator carries 22 fractional bits and a rounding half already added.
uint8_t Clip8(int32_t acc) {
  if (acc >= (1 << kPrecisionBits << 8)) return 255;
  if (acc <= 0) return 0;
  return static_cast<uint8_t>(acc >> kPrecisionBits);
}


// One 8-bit pass along the width. Reference: ImagingResampleHorizontal_8bpc. Reads rows
// [row0, row0 + rows) of src [*, src_w, 3] and writes [rows, out_w, 3].
std::vector<uint8_t> PassHorizontal(const std::vector<uint8_t>& src, int64_t src_w, int64_t row0, int64_t rows,
                                    const std::vector<Taps>& taps) {
  const int64_t out_w = static_cast<int64_t>(taps.size());
  constexpr int32_t kHalf = 1 << (kPrecisionBits - 1);
  std::vector<uint8_t> out(static_cast<size_t>(rows * out_w * 3));
  for (int64_t y = 0; y < rows; ++y) {
    const uint8_t* in_row = src.data() + (y + row0) * src_w * 3;
    uint8_t* out_row = out.data() + y * out_w * 3;
    for (int64_t xx = 0; xx < out_w; ++xx) {
      const Taps& t = taps[static_cast<size_t>(xx)];
      int32_t s0 = kHalf, s1 = kHalf, s2 = kHalf;
      for (size_t x = 0; x < t.weights.size(); ++x) {
        const uint8_t* p = in_row + (t.first + static_cast<int64_t>(x)) * 3;
        s0 += p[0] * t.weights[x];
        s1 += p[1] * t.weights[x];
        s2 += p[2] * t.weights[x];
      }
      out_row[xx * 3 + 0] = Clip8(s0);
      out_row[xx * 3 + 1] = Clip8(s1);
      out_row[xx * 3 + 2] = Clip8(s2);
    }
  }
  return out;
}

// One 8-bit pass along the height. Reference: ImagingResampleVertical_8bpc. src [*, w, 3] ->
// [taps.size(), w, 3]; tap indices are relative to row `row0` of src.
std::vector<uint8_t> PassVertical(const std::vector<uint8_t>& src, int64_t w, int64_t row0,
                                  const std::vector<Taps>& taps) {
  const int64_t out_h = static_cast<int64_t>(taps.size());
  constexpr int32_t kHalf = 1 << (kPrecisionBits - 1);
  std::vector<uint8_t> out(static_cast<size_t>(out_h * w * 3));
  for (int64_t yy = 0; yy < out_h; ++yy) {
    const Taps& t = taps[static_cast<size_t>(yy)];
    uint8_t* out_row = out.data() + yy * w * 3;
    for (int64_t xx = 0; xx < w; ++xx) {
      int32_t s0 = kHalf, s1 = kHalf, s2 = kHalf;
      for (size_t y = 0; y < t.weights.size(); ++y) {
        const uint8_t* p = src.data() + ((t.first - row0 + static_cast<int64_t>(y)) * w + xx) * 3;
        s0 += p[0] * t.weights[y];
        s1 += p[1] * t.weights[y];
        s2 += p[2] * t.weights[y];
      }
      out_row[xx * 3 + 0] = Clip8(s0);
      out_row[xx * 3 + 1] = Clip8(s1);
      out_row[xx * 3 + 2] = Clip8(s2);
    }
  }
  return out;
}

}  // namespace

// Reference: Pillow 13.0 ImagingResampleInner. The horizontal pass runs first (over only the rows
// the vertical pass needs) unless the height shrinks by more than twice as many pixels as the width
// does, in which case the vertical pass runs first; the intermediate image is 8-bit. (Pillow <= 12
// always ran the horizontal pass first; the order changes the rounding of the intermediate.)
// rgb: [in_h, in_w, 3] -> [out_h, out_w, 3].
std::vector<uint8_t> ResizeBilinearPil(const std::vector<uint8_t>& rgb, int64_t in_w, int64_t in_h,
                                       int64_t out_w, int64_t out_h) {
  if (in_w == out_w && in_h == out_h) return rgb;
  const bool need_h = out_w != in_w;
  const bool need_v = out_h != in_h;
  const bool horizontal_first = !((in_h - out_h) > 0 && (in_h - out_h) > (in_w - out_w) * 2);
  const std::vector<Taps> vtaps = PilCoefficients(in_h, out_h);
  if (!need_h) return PassVertical(rgb, in_w, 0, vtaps);
  const std::vector<Taps> htaps = PilCoefficients(in_w, out_w);
  if (!need_v) return PassHorizontal(rgb, in_w, 0, in_h, htaps);
  if (horizontal_first) {
    const int64_t ybox_first = vtaps.front().first;
    const int64_t ybox_last = vtaps.back().first + static_cast<int64_t>(vtaps.back().weights.size());
    const std::vector<uint8_t> temp = PassHorizontal(rgb, in_w, ybox_first, ybox_last - ybox_first, htaps);
    return PassVertical(temp, out_w, ybox_first, vtaps);
  }
  const std::vector<uint8_t> temp = PassVertical(rgb, in_w, 0, vtaps);
  return PassHorizontal(temp, in_w, 0, out_h, htaps);
}

namespace {

// Reference: aten/src/ATen/native/UpSample.h, cubic_convolution1/2 with A = -0.75, and
// get_cubic_upsample_coefficients; float32 throughout.
constexpr float kCubicA = -0.75f;
float CubicConv1(float x) { return ((kCubicA + 2) * x - (kCubicA + 3)) * x * x + 1; }
float CubicConv2(float x) { return ((kCubicA * x - 5 * kCubicA) * x + 8 * kCubicA) * x - 4 * kCubicA; }

struct CubicTaps {
  int64_t index[4];
  float weight[4];
};

// Reference: compute_indices_weights_cubic (UpSampleKernel.cpp) with
// area_pixel_compute_source_index(scale, dst, align_corners=false, cubic=true) and
// guard_index_and_lambda: src = scale*(dst+0.5)-0.5 (float), x0 = min(floor(src), in-1),
// t = clamp(src - x0, 0, 1); taps x0-1..x0+2 clamped to [0, in-1].
std::vector<CubicTaps> CubicAxis(int64_t in_size, int64_t out_size) {
  const float scale = static_cast<float>(in_size) / static_cast<float>(out_size);
  std::vector<CubicTaps> taps(static_cast<size_t>(out_size));
  for (int64_t o = 0; o < out_size; ++o) {
    const float real = scale * (static_cast<float>(o) + 0.5f) - 0.5f;
    const int64_t x0 = std::min(static_cast<int64_t>(std::floor(real)), in_size - 1);
    const float t = std::min(std::max(real - static_cast<float>(x0), 0.0f), 1.0f);
    CubicTaps& c = taps[static_cast<size_t>(o)];
    c.weight[0] = CubicConv2(t + 1.0f);
    c.weight[1] = CubicConv1(t);
    c.weight[2] = CubicConv1(1.0f - t);
    c.weight[3] = CubicConv2((1.0f - t) + 1.0f);
    for (int j = 0; j < 4; ++j) c.index[j] = std::clamp<int64_t>(x0 - 1 + j, 0, in_size - 1);
  }
  return taps;
}

}  // namespace

// Reference: torch upsample_bicubic2d CPU kernel (upsample_generic_Nd_kernel_impl with
// HelperInterpCubic, Interpolate<2>::eval): per output pixel, each of the 4 source rows is
// interpolated along the width, and the 4 row values are combined the same way along the height.
// Each 4-tap sum is `x0*w0; += x1*w1; += x2*w2; += x3*w3` as written in torch, which torch's
// AVX2/FMA build (the one x86-64 CPUs run) compiles to fma(x0, w0, x1*w1), then fma(x2, w2, .),
// then fma(x3, w3, .); that rounding is reproduced with std::fma (measured: bit-exact against
// torch 2.5.1, 17% of outputs differ by 1 ulp with plain multiply-adds). The weights are exact
// dyadic numbers for the integer scale factors the processor uses.
std::vector<float> ResizeBicubicTorch(const float* chw, int64_t channels, int64_t in_h, int64_t in_w,
                                      int64_t out_h, int64_t out_w) {
  const std::vector<CubicTaps> ty = CubicAxis(in_h, out_h);
  const std::vector<CubicTaps> tx = CubicAxis(in_w, out_w);
  std::vector<float> out(static_cast<size_t>(channels * out_h * out_w));
  for (int64_t c = 0; c < channels; ++c) {
    const float* plane = chw + c * in_h * in_w;
    float* oplane = out.data() + c * out_h * out_w;
    for (int64_t oy = 0; oy < out_h; ++oy) {
      const CubicTaps& y = ty[static_cast<size_t>(oy)];
      for (int64_t ox = 0; ox < out_w; ++ox) {
        const CubicTaps& x = tx[static_cast<size_t>(ox)];
        float rows[4];
        for (int r = 0; r < 4; ++r) {
          const float* row = plane + y.index[r] * in_w;
          float v = std::fma(row[x.index[0]], x.weight[0], row[x.index[1]] * x.weight[1]);
          v = std::fma(row[x.index[2]], x.weight[2], v);
          rows[r] = std::fma(row[x.index[3]], x.weight[3], v);
        }
        float acc = std::fma(rows[0], y.weight[0], rows[1] * y.weight[1]);
        acc = std::fma(rows[2], y.weight[2], acc);
        oplane[oy * out_w + ox] = std::fma(rows[3], y.weight[3], acc);
      }
    }
  }
  return out;
}

}  // namespace phi4mm::image_internal
