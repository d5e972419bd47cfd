// Kernel benchmarks on this machine: WeightMatrix::MatMul per storage format at the Phi-4-mini
// decoder's real shapes (qkv 3072->5120, o 3072->3072, gate_up 3072->16384, down 8192->3072, and
// the tied lm_head 3072->200064), for decode (n = 1, reported as weight GB/s) and prefill
// (n = 64 / 512, reported as GFLOP/s), plus a streaming-read bandwidth reference (1 and all
// threads) so the GEMV numbers can be read as a fraction of the memory ceiling. GemvCold streams
// weights that do not fit in the last-level cache (decode on the full model); TileShape compares
// register tile shapes for choosing the kernel tables' TileShape; Quantize times the load-time
// conversion to Q4_K and Q8_0. EncoderGemm runs the speech and vision encoders' GEMM shapes.
//   phi4mm_kernels_bench --benchmark_filter=Gemv   (decode only)
// PHI4MM_BENCH_THREADS=n sets the matmul pool size (default: one thread per core);
// PHI4MM_BENCH_KERNELS=name runs another kernel table this CPU has (scalar, avx2, avxvnni or
// avxvnni-evex, avx512, avx512zmm) instead of the active one.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <span>
#include <tuple>
#include <vector>

#include "phi4mm/base/half.h"
#include "phi4mm/base/huge_pages.h"
#include "phi4mm/kernels/weight_matrix.h"
#include "phi4mm/models/lora_linear.h"

namespace phi4mm {
namespace {

ThreadPool& Pool() {
  static ThreadPool pool(std::getenv("PHI4MM_BENCH_THREADS") ? std::atoi(std::getenv("PHI4MM_BENCH_THREADS")) : 0);
  return pool;
}

const MatMulKernels& Kernels() {
  static const MatMulKernels* const k = [] {
    const char* want = std::getenv("PHI4MM_BENCH_KERNELS");
    for (const MatMulKernels* t : AvailableKernels())
      if (want != nullptr && std::strcmp(want, t->name) == 0) return t;
    return &ActiveKernels();
  }();
  return *k;
}

// Deterministic pseudo-random bf16 weights of typical magnitude (~0.02), kept alive for reuse.
const WeightMatrix& Weights(int64_t rows, int64_t cols, WeightFormat f) {
  static std::map<std::tuple<int64_t, int64_t, int>, WeightMatrix> cache;
  static std::map<std::pair<int64_t, int64_t>, std::vector<uint16_t>> sources;
  auto key = std::make_tuple(rows, cols, static_cast<int>(f));
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  auto& src = sources[{rows, cols}];
  if (src.empty()) {
    src.resize(static_cast<size_t>(rows * cols));
    uint64_t s = 0x9E3779B97F4A7C15ull ^ static_cast<uint64_t>(rows * 31 + cols);
    for (uint16_t& h : src) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      const float v = (static_cast<float>((s >> 40) & 0xFFFF) / 65536.0f - 0.5f) * 0.08f;
      h = F32ToBf16(v);
    }
  }
  WeightMatrix base = *WeightMatrix::FromData(DType::kBF16, src.data(), rows, cols);
  return cache.emplace(key, *base.Quantize(f, &Pool())->ForKernels(Kernels(), &Pool())).first->second;
}

std::vector<float> Activations(int64_t n, int64_t cols) {
  std::vector<float> x(static_cast<size_t>(n * cols));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 2654435761u) % 1000) / 500.0f - 1.0f;
  return x;
}

void BM_MatMul(benchmark::State& state) {
  const auto f = static_cast<WeightFormat>(state.range(0));
  const int64_t rows = state.range(1), cols = state.range(2), n = state.range(3);
  const WeightMatrix& w = Weights(rows, cols, f);
  const std::vector<float> x = Activations(n, cols);
  std::vector<float> y(static_cast<size_t>(n * rows));
  for (auto _ : state) {
    w.MatMulWith(Kernels(), x.data(), n, y.data(), &Pool());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetLabel(std::string(WeightFormatName(f)) + " " + Kernels().name);
  if (n == 1)
    state.counters["GB/s"] = benchmark::Counter(static_cast<double>(w.bytes()) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * rows * cols * n / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

void DecoderShapes(benchmark::internal::Benchmark* b, bool gemv) {
  const int64_t shapes[][2] = {{5120, 3072}, {3072, 3072}, {16384, 3072}, {3072, 8192}, {200064, 3072}};
  for (int f : {0, 1, 2, 3, 4}) {
    for (const auto& s : shapes) {
      if (gemv) {
        if (f == 0 && s[0] == 200064) continue;  // 2.4 GB of f32: skip
        b->Args({f, s[0], s[1], 1});
      } else {
        if (s[0] == 200064) continue;  // the head runs on one row per step
        for (int64_t n : {64, 512}) {
          if (n == 512 && f != 1 && f != 3 && f != 4) continue;
          b->Args({f, s[0], s[1], n});
        }
      }
    }
  }
}

BENCHMARK(BM_MatMul)->Name("Gemv")->Apply([](auto* b) { DecoderShapes(b, true); })->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MatMul)->Name("Gemm")->Apply([](auto* b) { DecoderShapes(b, false); })->UseRealTime()->Unit(benchmark::kMillisecond);

// The encoders' GEMMs: the Conformer's (D 1024, FFN 1536, GLU 2048) at the encoder frames of a 5-s
// and a 30-s clip (63 and 375 rows), and SigLIP's (1152, MLP 4304) over one crop's 1024 patches.
void EncoderShapes(benchmark::internal::Benchmark* b) {
  const int64_t speech[][2] = {{3072, 1024}, {1024, 1536}, {1024, 1024}, {2048, 1024}};
  const int64_t vision[][2] = {{1152, 1152}, {4304, 1152}, {1152, 4304}};
  for (int f : {0, 1, 3}) {
    for (const auto& s : speech)
      for (int64_t n : {63, 375}) b->Args({f, s[0], s[1], n});
    for (const auto& s : vision) b->Args({f, s[0], s[1], 1024});
  }
}

BENCHMARK(BM_MatMul)->Name("EncoderGemm")->Apply(EncoderShapes)->UseRealTime()->Unit(benchmark::kMillisecond);

// A view of a fresh copy of `w`'s storage (kept for the process), so that benchmarks can walk
// more distinct bytes than the last-level cache holds. Copies of 2 MiB and more sit in 2 MiB
// pages, as the memory-mapped weights and the buffers converted at load do.
WeightMatrix ColdCopy(const WeightMatrix& w) {
  static std::deque<std::shared_ptr<uint8_t[]>> stores;
  uint8_t* p = stores.emplace_back(AllocateHugeAligned(w.bytes())).get();
  std::memcpy(p, w.data(), w.bytes());
  return *WeightMatrix::FromStorage(w.format(), p, w.bytes(), w.rows(), w.cols(), w.layout());
}

// Decode as it runs on the full model: the weights do not fit in the last-level cache, so the GEMV
// walks `copies` distinct copies of the matrix (at least 1 GB in all) and reports weight GB/s from
// memory. Args: format, rows, cols, activation rows (1 for decode, 2-8 for batched requests).
void BM_GemvCold(benchmark::State& state) {
  const auto f = static_cast<WeightFormat>(state.range(0));
  const int64_t rows = state.range(1), cols = state.range(2), n = state.range(3);
  const WeightMatrix& src = Weights(rows, cols, f);
  const size_t copies = std::max<size_t>(2, (size_t{1} << 30) / src.bytes() + 1);
  static std::map<std::tuple<int64_t, int64_t, int>, std::vector<WeightMatrix>> all_mats;
  std::vector<WeightMatrix>& mats = all_mats[{rows, cols, static_cast<int>(f)}];
  while (mats.size() < copies) mats.push_back(ColdCopy(src));
  const std::vector<float> x = Activations(n, cols);
  std::vector<float> y(static_cast<size_t>(n * rows));
  size_t next = 0;
  for (auto _ : state) {
    mats[next].MatMulWith(Kernels(), x.data(), n, y.data(), &Pool());
    next = (next + 1) % mats.size();
    benchmark::DoNotOptimize(y.data());
  }
  state.SetLabel(std::string(WeightFormatName(f)) + " " + Kernels().name);
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(src.bytes()) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_GemvCold)
    ->Name("GemvCold")
    ->Apply([](auto* b) {
      for (int f : {1, 3, 4})
        for (const auto& s : {std::pair<int64_t, int64_t>{16384, 3072}, {3072, 8192}, {5120, 3072}})
          for (int64_t n : {1, 4, 8}) b->Args({f, s.first, s.second, n});
      // The LoRA factors of the real adapters (rank 256 vision, 320 speech): B's short rows, A's few rows.
      for (int f : {1, 3, 4})
        for (const auto& s : {std::pair<int64_t, int64_t>{16384, 320}, {5120, 256}, {320, 8192}, {256, 3072}})
          b->Args({f, s.first, s.second, 1});
    })
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// One decoder layer of a 4-row batched decode step with both LoRA adapters present (rows: text,
// vision, speech, text), from memory: the four projections through LoraLinear::Forward as the
// decoder runs them (the Q4_K base product over 4 rows, then the vision (rank 256) and speech
// (rank 320) A and B passes over their row). Arg: 0 the base products only (a text-only batch),
// 1 with the adapters in Q8_0 (their format under q4m), 2 in Q4_K (under q4). It runs on the active
// kernel table (PHI4MM_ISA picks it; PHI4MM_BENCH_KERNELS does not apply here).
void BM_LoraLayerCold(benchmark::State& state) {
  const int variant = static_cast<int>(state.range(0));
  const WeightFormat adapter_format = variant == 1 ? WeightFormat::kQ8_0 : WeightFormat::kQ4K;
  const int64_t shapes[][2] = {{5120, 3072}, {3072, 3072}, {16384, 3072}, {3072, 8192}};
  const int64_t ranks[] = {256, 320};
  // Copies of the layer (57 MB of base, 19-28 MB of adapters) so that the step streams from memory.
  static std::map<int, std::vector<std::vector<LoraLinear>>> all_layers;
  std::vector<std::vector<LoraLinear>>& layers = all_layers[static_cast<int>(adapter_format)];
  // A cold copy in the active table's layout (Weights() gives PHI4MM_BENCH_KERNELS's).
  auto cold = [](int64_t rows, int64_t cols, WeightFormat f) {
    return *ColdCopy(Weights(rows, cols, f)).ForKernels(ActiveKernels(), &Pool());
  };
  while (layers.size() < 6) {
    std::vector<LoraLinear> layer;
    for (const auto& s : shapes) {
      LoraAdapter ad[2];
      for (int j = 0; j < 2; ++j) {
        ad[j].a = cold(ranks[j], s[1], adapter_format);
        ad[j].b = cold(s[0], ranks[j], adapter_format);
        ad[j].scale = 2.0f;
      }
      layer.emplace_back(cold(s[0], s[1], WeightFormat::kQ4K), ad[0], ad[1]);
    }
    layers.push_back(std::move(layer));
  }
  const int64_t n = 4;
  const LoraSegment mixed[] = {{1, 2, LoraMode::kVision}, {2, 3, LoraMode::kSpeech}};
  const std::span<const LoraSegment> segments = variant == 0 ? std::span<const LoraSegment>() : std::span(mixed);
  const std::vector<float> x = Activations(n, 8192);
  std::vector<float> y(static_cast<size_t>(n * 16384)), scratch;
  size_t next = 0;
  for (auto _ : state) {
    for (const LoraLinear& p : layers[next]) p.Forward(x.data(), n, y.data(), segments, &Pool(), &scratch);
    next = (next + 1) % layers.size();
    benchmark::DoNotOptimize(y.data());
  }
  size_t bytes = 0;
  for (const LoraLinear& p : layers[0]) {
    bytes += p.base().bytes();
    for (const LoraSegment& seg : segments) bytes += p.adapter(seg.mode)->a.bytes() + p.adapter(seg.mode)->b.bytes();
  }
  state.SetLabel(std::string(variant == 0 ? "base only" : WeightFormatName(adapter_format)) + " " + ActiveKernels().name);
  state.counters["MB"] = static_cast<double>(bytes) / 1e6;
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(bytes) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_LoraLayerCold)->Name("LoraLayerCold")->DenseRange(0, 2)->UseRealTime()->Unit(benchmark::kMillisecond);

// One tile shape against another on the same matrix (args: format, rows, cols, n, R, N): the
// chosen table with its preferred shape replaced, for choosing TileShape values.
void BM_TileShape(benchmark::State& state) {
  const auto f = static_cast<WeightFormat>(state.range(0));
  const int64_t rows = state.range(1), cols = state.range(2), n = state.range(3);
  MatMulKernels k = Kernels();
  const int R = static_cast<int>(state.range(4)), N = static_cast<int>(state.range(5));
  k.shape[static_cast<int>(f)] = {R, R, N, R, N};
  const WeightMatrix& w = Weights(rows, cols, f);
  const std::vector<float> x = Activations(n, cols);
  std::vector<float> y(static_cast<size_t>(n * rows));
  for (auto _ : state) {
    w.MatMulWith(k, x.data(), n, y.data(), &Pool());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetLabel(std::string(WeightFormatName(f)) + " " + k.name);
  state.counters["GMAC/s"] = benchmark::Counter(1.0 * rows * cols * n / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_TileShape)
    ->Name("TileShape")
    ->Apply([](auto* b) {
      for (int f : {1, 3, 4})
        for (const auto& rn : {std::pair<int, int>{1, 4}, {1, 6}, {1, 8}, {2, 4}, {2, 2}, {2, 3}, {3, 2}, {3, 3}, {3, 4},
                               {4, 2}, {4, 3}, {4, 4}, {2, 8}, {3, 8}, {4, 8}})
          b->Args({f, 16384, 3072, 256, rn.first, rn.second});
      for (int f : {1, 3, 4})
        for (int r : {1, 2, 4}) b->Args({f, 16384, 3072, 1, r, 1});
      for (int f : {3, 4})
        for (int n : {4, 8})
          for (const auto& rn : {std::pair<int, int>{1, 4}, {2, 4}, {3, 4}, {4, 4}, {4, 2}, {2, 2}, {2, 3}, {3, 2}, {1, 8}, {2, 8},
                                 {3, 8}, {4, 8}})
            // A tile of N > n activation rows runs as one of n: the same shape timed again.
            if (rn.second <= n) b->Args({f, 16384, 3072, n, rn.first, rn.second});
    })
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// Sums a 512 MiB buffer split over `threads` threads (0: as many as the matmul pool has).
void BM_StreamRead(benchmark::State& state) {
  const int threads = state.range(0) == 0 ? Pool().num_threads() : static_cast<int>(state.range(0));
  static std::vector<uint64_t> buf(size_t{64} << 20, 1);
  std::vector<uint64_t> sums(static_cast<size_t>(threads));
  ThreadPool pool(threads);
  for (auto _ : state) {
    pool.ParallelFor(threads, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        const size_t len = buf.size() / threads, off = static_cast<size_t>(t) * len;
        uint64_t s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (size_t i = off; i + 8 <= off + len; i += 8)
          for (int l = 0; l < 8; ++l) s[l] += buf[i + l];
        sums[t] = s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
      }
    });
    benchmark::DoNotOptimize(sums.data());
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(buf.size() * 8) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_StreamRead)->Arg(1)->Arg(0)->UseRealTime()->Unit(benchmark::kMillisecond);

// Load-time conversion of one 3072 x 3072 f32 matrix on one thread (WeightMatrix::Quantize): what
// `--quant q4` / `q8` pay per weight when a model loads from a float checkpoint.
void BM_Quantize(benchmark::State& state) {
  const auto format = static_cast<WeightFormat>(state.range(0));
  constexpr int64_t kRows = 3072, kCols = 3072;
  std::vector<float> w(static_cast<size_t>(kRows * kCols));
  uint64_t seed = 7;
  for (float& v : w) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    v = (static_cast<float>(seed >> 40) / static_cast<float>(1 << 24) - 0.5f) * 0.04f;
  }
  const WeightMatrix src = WeightMatrix::FromF32(std::move(w), kRows, kCols);
  for (auto _ : state) {
    auto q = src.Quantize(format, nullptr);
    benchmark::DoNotOptimize(q.ok() ? q->data() : nullptr);
  }
  state.SetLabel(WeightFormatName(format));
  state.counters["Mweights/s"] = benchmark::Counter(static_cast<double>(kRows * kCols) / 1e6,
                                                    benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Quantize)
    ->Arg(static_cast<int>(WeightFormat::kQ4K))
    ->Arg(static_cast<int>(WeightFormat::kQ8_0))
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace phi4mm

BENCHMARK_MAIN();
