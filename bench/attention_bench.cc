// Attention benchmarks (Google Benchmark) at Phi-4-mini's shape (24 query heads, 8 KV heads, head
// dim 128): causal prefill of S = 512 / 2048 new positions on an empty cache, and one decode step
// after past = 512 / 4096 cached positions, for each KV-cache element type. GFLOP/s counts QK^T and
// PV (4 * heads * head_dim per query-key pair, the causal triangle for prefill).
// PHI4MM_BENCH_THREADS=n sets the pool size (default: one thread per core).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <vector>

#include "phi4mm/kernels/attention.h"

namespace phi4mm {
namespace {

constexpr int64_t kHeads = 24, kKvHeads = 8, kHeadDim = 128;

ThreadPool& Pool() {
  static ThreadPool pool(std::getenv("PHI4MM_BENCH_THREADS") ? std::atoi(std::getenv("PHI4MM_BENCH_THREADS")) : 0);
  return pool;
}

std::vector<float> Values(int64_t n, uint32_t seed) {
  std::vector<float> x(static_cast<size_t>(n));
  uint32_t s = seed * 2654435761u + 1;
  for (float& v : x) {
    s = s * 1664525u + 1013904223u;
    v = static_cast<float>(s >> 8) / 8388608.0f - 1.0f;
  }
  return x;
}

// A cache of T positions in `dtype`, filled through the same row conversion the decoder uses and
// laid out as the decoder's KvCache holds it: head-major (each head's positions contiguous, one
// plane of T positions per head).
struct Cache {
  Cache(KvDType dtype, int64_t T) : dtype(dtype), T(T) {
    const int64_t row = kKvHeads * kHeadDim;
    hb = KvHeadBytes(dtype, kHeadDim);
    k.resize(T * kKvHeads * hb);
    v.resize(k.size());
    const std::vector<float> kf = Values(T * row, 1), vf = Values(T * row, 2);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < kKvHeads; ++h) {
        const size_t at = static_cast<size_t>((h * T + t) * static_cast<int64_t>(hb));
        StoreKvRow(dtype, kf.data() + t * row + h * kHeadDim, 1, kHeadDim, k.data() + at);
        StoreKvRow(dtype, vf.data() + t * row + h * kHeadDim, 1, kHeadDim, v.data() + at);
      }
  }
  KvView view() const {
    return KvView{k.data(), v.data(), dtype, static_cast<int64_t>(hb), T * static_cast<int64_t>(hb)};
  }
  KvDType dtype;
  int64_t T;
  size_t hb = 0;
  std::vector<uint8_t> k, v;
};

// range(0): KvDType, range(1): past, range(2): S.
void BM_Attention(benchmark::State& state) {
  const auto dtype = static_cast<KvDType>(state.range(0));
  const int64_t past = state.range(1), S = state.range(2);
  const Cache cache(dtype, past + S);
  const std::vector<float> q = Values(S * kHeads * kHeadDim, 3);
  std::vector<float> out(q.size());
  const AttentionShape shape{kHeads, kKvHeads, kHeadDim, 0.08838834764f};
  for (auto _ : state) {
    CausalAttention(q.data(), cache.view(), past, S, shape, out.data(), &Pool());
    benchmark::DoNotOptimize(out.data());
  }
  double pairs = 0;
  for (int64_t s = 0; s < S; ++s) pairs += static_cast<double>(past + s + 1);
  state.SetLabel(KvDTypeName(dtype));
  state.counters["GFLOP/s"] = benchmark::Counter(4.0 * kHeads * kHeadDim * pairs / 1e9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

void Cases(benchmark::internal::Benchmark* b, bool prefill) {
  for (int dt : {0, 1, 2})
    for (int64_t n : prefill ? std::vector<int64_t>{512, 2048} : std::vector<int64_t>{512, 4096})
      b->Args(prefill ? std::vector<int64_t>{dt, 0, n} : std::vector<int64_t>{dt, n, 1});
  // A 512-row prefill chunk deep into a long prompt: the cache (~34 MB per K and V in f16) is far
  // out of cache, as for the chunks of a 32k-token prompt.
  if (prefill) b->Args({1, 8192, 512});
}

BENCHMARK(BM_Attention)->Name("Prefill")->Apply([](auto* b) { Cases(b, true); })->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Attention)->Name("Decode")->Apply([](auto* b) { Cases(b, false); })->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace phi4mm

BENCHMARK_MAIN();
