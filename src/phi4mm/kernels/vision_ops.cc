// Generic float32 vision-transformer operators: masked bidirectional batch attention, 2x2 average
// pooling and the row-parallel bias / GELU / residual steps. Scalar reference versions, and the
// per-ISA table (vision_ops_hwy-inl.h compiled for AVX2 in vision_ops_avx2.cc on x86 and for NEON
// in vision_ops_neon.cc on aarch64) picked by the process's ISA.
#include "phi4mm/kernels/vision_ops.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "phi4mm/kernels/ops.h"
#include "phi4mm/kernels/weight_matrix.h"

namespace phi4mm {

namespace {

const vision_internal::VisionKernels& Active() {
  static const vision_internal::VisionKernels* const active = &vision_internal::VisionKernelsFor(ActiveIsa());
  return *active;
}

void ForRows(int64_t n, ThreadPool* pool, const std::function<void(int64_t, int64_t)>& fn) {
  if (pool) {
    pool->ParallelFor(n, fn, 16);
  } else {
    fn(0, n);
  }
}

}  // namespace

void BidirectionalAttention(const float* q, const float* k, const float* v, const uint8_t* key_valid,
                            const BatchAttentionShape& s, float* out, ThreadPool* pool) {
  Active().attention(q, k, v, key_valid, s, out, pool);
}

void AddBiasParallel(float* y, const float* bias, int64_t n, int64_t dim, ThreadPool* pool) {
  ForRows(n, pool, [&](int64_t r0, int64_t r1) { AddBiasRows(y + r0 * dim, bias, r1 - r0, dim); });
}

void AddBiasGeluTanh(float* y, const float* bias, int64_t n, int64_t dim, ThreadPool* pool) {
  const auto gelu = Active().gelu_tanh;
  ForRows(n, pool, [&](int64_t r0, int64_t r1) {
    AddBiasRows(y + r0 * dim, bias, r1 - r0, dim);
    gelu(y + r0 * dim, (r1 - r0) * dim);
  });
}

void AddBiasResidual(float* h, const float* y, const float* bias, int64_t n, int64_t dim, ThreadPool* pool) {
  ForRows(n, pool, [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i)
      for (int64_t j = 0; j < dim; ++j) h[i * dim + j] += y[i * dim + j] + bias[j];
  });
}

void BidirectionalAttentionReference(const float* q, const float* k, const float* v, const uint8_t* key_valid,
                            const BatchAttentionShape& s, float* out, ThreadPool* pool) {
  const int64_t width = s.n_heads * s.head_dim, hd = s.head_dim, S = s.seq;
  // One task = (sequence, head, block of query rows).
  constexpr int64_t kRowsPerTask = 64;
  const int64_t blocks = (S + kRowsPerTask - 1) / kRowsPerTask;
  const int64_t tasks = s.batch * s.n_heads * blocks;
  auto run = [&](int64_t t0, int64_t t1) {
    std::vector<float> scores(static_cast<size_t>(S));
    std::vector<int64_t> keys;
    keys.reserve(static_cast<size_t>(S));
    std::vector<double> acc(static_cast<size_t>(hd));
    int64_t keys_for = -1;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t b = t / (s.n_heads * blocks);
      const int64_t h = (t / blocks) % s.n_heads;
      const int64_t blk = t % blocks;
      if (keys_for != b) {
        keys.clear();
        for (int64_t j = 0; j < S; ++j)
          if (key_valid == nullptr || key_valid[b * S + j] != 0) keys.push_back(j);
        if (keys.empty())
          for (int64_t j = 0; j < S; ++j) keys.push_back(j);
        keys_for = b;
      }
      const int64_t nk = static_cast<int64_t>(keys.size());
      const float* kb = k + b * S * width + h * hd;
      const float* vb = v + b * S * width + h * hd;
      const int64_t i1 = std::min(S, (blk + 1) * kRowsPerTask);
      for (int64_t i = blk * kRowsPerTask; i < i1; ++i) {
        const float* qi = q + (b * S + i) * width + h * hd;
        for (int64_t j = 0; j < nk; ++j) scores[j] = DotF32(qi, kb + keys[j] * width, hd) * s.scale;
        SoftmaxInPlace(scores.data(), nk);
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = 0; j < nk; ++j) {
          const float p = scores[j];
          const float* vj = vb + keys[j] * width;
          for (int64_t d = 0; d < hd; ++d) acc[d] += static_cast<double>(p) * vj[d];
        }
        float* oi = out + (b * S + i) * width + h * hd;
        for (int64_t d = 0; d < hd; ++d) oi[d] = static_cast<float>(acc[d]);
      }
    }
  };
  if (pool) {
    pool->ParallelFor(tasks, run, 1);
  } else {
    run(0, tasks);
  }
}

void AvgPool2x2(const float* x, int64_t batch, int64_t h, int64_t w, int64_t c, float* out, ThreadPool* pool) {
  const int64_t oh = (h + 1) / 2, ow = (w + 1) / 2;
  // Reflection padding by one: index h maps to h - 2 (the row before the last).
  auto src_row = [h](int64_t r) { return r < h ? r : h - 2; };
  auto src_col = [w](int64_t col) { return col < w ? col : w - 2; };
  auto run = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t b = t / oh, r = t % oh;
      for (int64_t col = 0; col < ow; ++col) {
        float* o = out + ((b * oh + r) * ow + col) * c;
        const float* p[4];
        int n = 0;
        for (int64_t dr = 0; dr < 2; ++dr)
          for (int64_t dc = 0; dc < 2; ++dc)
            p[n++] = x + ((b * h + src_row(2 * r + dr)) * w + src_col(2 * col + dc)) * c;
        for (int64_t ch = 0; ch < c; ++ch) {
          float sum = 0.0f;
          for (int i = 0; i < 4; ++i) sum += p[i][ch];
          o[ch] = sum / 4.0f;
        }
      }
    }
  };
  if (pool) {
    pool->ParallelFor(batch * oh, run, 4);
  } else {
    run(0, batch * oh);
  }
}

namespace vision_internal {

const VisionKernels& VisionKernelsFor(Isa isa) {
  static const VisionKernels scalar{&BidirectionalAttentionReference, &GeluTanhInPlace};
#if defined(PHI4MM_BUILD_X86_KERNELS)
  static const VisionKernels avx2{&BidirectionalAttentionAvx2, &GeluTanhAvx2};
  if (FloatKernelIsa(isa) == Isa::kAvx2) return avx2;
#endif
#if defined(PHI4MM_BUILD_ARM_KERNELS)
  static const VisionKernels neon{&BidirectionalAttentionNeon, &GeluTanhNeon};
  if (FloatKernelIsa(isa) == Isa::kNeon) return neon;
#endif
  (void)isa;
  return scalar;
}

}  // namespace vision_internal

}  // namespace phi4mm
