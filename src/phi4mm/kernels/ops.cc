// Reference implementations of the float32 operators.
#include "phi4mm/kernels/ops.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace phi4mm {

void RmsNorm(const float* x, const float* w, int64_t n, int64_t dim, float eps, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float* xi = x + i * dim;
    float* oi = out + i * dim;
    double ss = 0;
    for (int64_t j = 0; j < dim; ++j) ss += static_cast<double>(xi[j]) * xi[j];
    const float inv = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(dim)) + eps);
    for (int64_t j = 0; j < dim; ++j) oi[j] = w[j] * (xi[j] * inv);
  }
}

void SiluGateUp(const float* gu, int64_t n, int64_t d, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float* g = gu + i * 2 * d;
    const float* u = g + d;
    float* o = out + i * d;
    for (int64_t j = 0; j < d; ++j) o[j] = u[j] * (g[j] / (1.0f + std::exp(-g[j])));
  }
}

void SoftmaxInPlace(float* x, int64_t n) {
  float m = -INFINITY;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, x[i]);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - m);
    s += x[i];
  }
  const float inv = static_cast<float>(1.0 / s);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void ApplyRotary(float* x, int64_t n_heads, int64_t head_dim, int64_t rot_dim, const float* cos,
                 const float* sin) {
  const int64_t half = rot_dim / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* v = x + h * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      const float a = v[i], b = v[i + half];
      v[i] = a * cos[i] - b * sin[i];
      v[i + half] = b * cos[i + half] + a * sin[i + half];
    }
  }
}

namespace ops_internal {

void LayerNormRowScalar(const float* x, const float* w, const float* b, int64_t dim, float eps, float* out) {
  double mean = 0;
  for (int64_t j = 0; j < dim; ++j) mean += x[j];
  mean /= static_cast<double>(dim);
  double var = 0;
  for (int64_t j = 0; j < dim; ++j) {
    const double d = x[j] - mean;
    var += d * d;
  }
  var /= static_cast<double>(dim);
  const double rstd = 1.0 / std::sqrt(var + static_cast<double>(eps));
  for (int64_t j = 0; j < dim; ++j) out[j] = static_cast<float>((x[j] - mean) * rstd) * w[j] + b[j];
}

LayerNormRowFn LayerNormRowFor(Isa isa) {
#if defined(PHI4MM_BUILD_X86_KERNELS)
  if (FloatKernelIsa(isa) == Isa::kAvx2) return &LayerNormRowAvx2;
#endif
#if defined(PHI4MM_BUILD_ARM_KERNELS)
  if (FloatKernelIsa(isa) == Isa::kNeon) return &LayerNormRowNeon;
#endif
  (void)isa;
  return &LayerNormRowScalar;
}

}  // namespace ops_internal

void LayerNorm(const float* x, const float* w, const float* b, int64_t n, int64_t dim, float eps, float* out,
               ThreadPool* pool) {
  static const ops_internal::LayerNormRowFn row = ops_internal::LayerNormRowFor(ActiveIsa());
  auto rows = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) row(x + r * dim, w, b, dim, eps, out + r * dim);
  };
  if (pool) {
    pool->ParallelFor(n, rows, 64);
  } else {
    rows(0, n);
  }
}

void GeluTanhInPlace(float* x, int64_t n) {
  const float kBeta = static_cast<float>(M_SQRT2 * M_2_SQRTPI * 0.5);
  const float kKappa = 0.044715f;
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float inner = kBeta * (v + kKappa * v * v * v);
    x[i] = 0.5f * v * (1.0f + std::tanh(inner));
  }
}

void GeluErfInPlace(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    x[i] = v * 0.5f * (1.0f + std::erf(v * static_cast<float>(M_SQRT1_2)));
  }
}

void AddBiasRows(float* y, const float* bias, int64_t n, int64_t dim) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < dim; ++j) y[i * dim + j] += bias[j];
}

}  // namespace phi4mm
