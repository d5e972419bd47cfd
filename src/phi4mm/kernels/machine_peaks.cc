// MeasureMachinePeaks: the timing harness (warm-up, best of N, one chunk per pool thread), the
// choice of loops after the process's ISA (kernels/isa.h), and the scalar loops of the scalar ISA.
#include "phi4mm/kernels/machine_peaks.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include "phi4mm/kernels/isa.h"
#include "phi4mm/kernels/quant_kernels.h"

namespace phi4mm {

namespace peaks_internal {

uint64_t ReadSumScalar(const uint8_t* p, size_t n) {
  uint64_t acc[4] = {};
  for (size_t i = 0; i + 32 <= n; i += 32)
    for (int j = 0; j < 4; ++j) {
      uint64_t w;
      std::memcpy(&w, p + i + 8 * j, 8);
      acc[j] += w;
    }
  return acc[0] + acc[1] + acc[2] + acc[3];
}

float FmaLoopScalar(int64_t iters, float seed) {
  float acc[12][8];
  for (int c = 0; c < 12; ++c)
    for (int l = 0; l < 8; ++l) acc[c][l] = seed + c + l;
  const float a = 0.999f, b = 1e-3f;
  for (int64_t i = 0; i < iters; ++i)
    for (int c = 0; c < 12; ++c)
      for (int l = 0; l < 8; ++l) acc[c][l] = acc[c][l] * a + b;
  float s = 0;
  for (auto& c : acc)
    for (float v : c) s += v;
  return s;
}

int32_t Int8LoopScalar(int64_t iters, int32_t seed) {
  int32_t acc[8][8] = {};
  const uint8_t a = static_cast<uint8_t>(seed | 1);
  const int8_t b = 3;
  for (int64_t i = 0; i < iters; ++i)
    for (int c = 0; c < 8; ++c)
      for (int l = 0; l < 8; ++l) acc[c][l] += 32 * a * b / 8 + c;
  int32_t s = 0;
  for (auto& c : acc)
    for (int32_t v : c) s += v;
  return s;
}

}  // namespace peaks_internal

namespace {

using Clock = std::chrono::steady_clock;

// The loops of one ISA, and the multiply-adds one iteration of its int8 loop does.
struct Loops {
  uint64_t (*read)(const uint8_t*, size_t);
  float (*fma)(int64_t, float);
  int32_t (*int8)(int64_t, int32_t);
  double int8_macs;
  int32_t (*int8_q8)(int64_t, int32_t);  // the Q8_0 tile's mix, 256 MACs per iteration; null: as int8
};

Loops LoopsFor(Isa isa) {
  namespace pi = peaks_internal;
  switch (isa) {
#if defined(PHI4MM_BUILD_X86_KERNELS)
    case Isa::kAvx2: return {pi::ReadSumAvx2, pi::FmaLoopAvx2, pi::Int8LoopAvx2, 256.0, pi::Int8PairLoopAvx2};
    case Isa::kAvxVnni:
      return {pi::ReadSumAvx2, pi::FmaLoopAvx2,
              AvxVnniEncoding() == VnniEncoding::kVex ? pi::Int8LoopAvxVnni : pi::Int8LoopVnni, pi::kInt8LoopVnniMacs,
              nullptr};
    case Isa::kAvx512:
      if (ActiveAvx512Tiles() == Avx512Tiles::kZmm)
        return {pi::ReadSumAvx2, pi::FmaLoopAvx2, pi::Int8LoopVnniZmm, pi::kInt8LoopVnniZmmMacs, nullptr};
      return {pi::ReadSumAvx2, pi::FmaLoopAvx2, pi::Int8LoopVnni, pi::kInt8LoopVnniMacs, nullptr};
#endif
#if defined(PHI4MM_BUILD_ARM_KERNELS)
    case Isa::kNeon: return {pi::ReadSumNeon, pi::FmaLoopNeon, pi::Int8LoopNeon, pi::kInt8LoopNeonMacs, nullptr};
    case Isa::kNeonDot: return {pi::ReadSumNeon, pi::FmaLoopNeon, pi::Int8LoopNeonDot, pi::kInt8LoopNeonDotMacs, nullptr};
#endif
    default: return {pi::ReadSumScalar, pi::FmaLoopScalar, pi::Int8LoopScalar, 256.0, nullptr};
  }
}

// Seconds for `fn(thread)` run once on every thread at the same time; best of `trials` after one
// warm-up run.
template <typename Fn>
double BestSeconds(ThreadPool* pool, int threads, int trials, Fn fn) {
  double best = 1e30;
  for (int r = -1; r < trials; ++r) {
    const auto t0 = Clock::now();
    if (pool) pool->ParallelFor(threads, [&](int64_t b, int64_t e) { for (int64_t i = b; i < e; ++i) fn(i); });
    else fn(0);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (r >= 0) best = std::min(best, s);
  }
  return best;
}

}  // namespace

double MeasureReadBandwidth(ThreadPool* pool, const PeakOptions& opts) {
  const Loops loops = LoopsFor(ActiveIsa());
  const int T = pool ? pool->num_threads() : 1;
  const int trials = std::max(1, opts.trials);
  std::atomic<uint64_t> sink{0};
  // Each thread streams its own contiguous slice (written by that thread first, so its pages are
  // resident and local).
  const size_t slice = std::max<size_t>(opts.read_bytes / T / 128 * 128, 128);
  std::unique_ptr<uint8_t[]> buf(new uint8_t[slice * T]);
  if (pool) {
    pool->ParallelFor(T, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) std::memset(buf.get() + t * slice, static_cast<int>(t + 1), slice);
    });
  } else {
    std::memset(buf.get(), 1, slice);
  }
  const double read_s = BestSeconds(pool, T, trials, [&](int64_t t) {
    const uint8_t* p = buf.get() + t * slice;
    sink += loops.read(p, slice);
  });
  return static_cast<double>(slice) * T / read_s / 1e9;
}

MachinePeaks MeasureMachinePeaks(ThreadPool* pool, const PeakOptions& opts) {
  MachinePeaks m;
  m.threads = pool ? pool->num_threads() : 1;
  m.isa = ActiveKernels().name;
  const Loops loops = LoopsFor(ActiveIsa());
  const int T = m.threads;
  const int trials = std::max(1, opts.trials);
  std::atomic<uint64_t> sink{0};

  m.read_gb_per_s = MeasureReadBandwidth(pool, opts);

  const int64_t iters = std::max<int64_t>(1, opts.compute_iterations);
  const double fma_s = BestSeconds(pool, T, trials, [&](int64_t t) {
    const float r = loops.fma(iters, static_cast<float>(t));
    sink += static_cast<uint64_t>(r);
  });
  m.f32_gflop_per_s = 192.0 * static_cast<double>(iters) * T / fma_s / 1e9;

  const double int8_s = BestSeconds(pool, T, trials, [&](int64_t t) {
    const int32_t seed = static_cast<int32_t>(t + 1);
    sink += static_cast<uint64_t>(loops.int8(iters, seed));
  });
  m.int8_gmac_per_s = loops.int8_macs * static_cast<double>(iters) * T / int8_s / 1e9;
  m.int8_q8_gmac_per_s = m.int8_gmac_per_s;
  if (loops.int8_q8 != nullptr) {
    const double q8_s = BestSeconds(pool, T, trials, [&](int64_t t) {
      sink += static_cast<uint64_t>(loops.int8_q8(iters, static_cast<int32_t>(t + 1)));
    });
    m.int8_q8_gmac_per_s = 256.0 * static_cast<double>(iters) * T / q8_s / 1e9;
  }
  return m;
}

}  // namespace phi4mm
