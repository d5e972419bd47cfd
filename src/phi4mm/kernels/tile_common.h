// What the matmul tile kernels of every table (scalar, AVX2, AVX-512, NEON) share: the store of a
// finished sum and the GEMV prefetch. It has internal linkage (an anonymous namespace), so each kernel file compiled with its own ISA flags
// keeps its own copy and the linker can never hand an extended-ISA version to baseline code.
// Include only from src/phi4mm/kernels/quant_kernels*.cc and the tile headers they include.
#pragma once

#include <cstdint>

#include "phi4mm/kernels/quant_kernels.h"

namespace phi4mm {
namespace {

// y[i][r] of the tile = v, or += v when the call accumulates.
inline void Store(const TileArgs& t, int r, int i, float v) {
  float& y = t.y[i * t.ldy + r];
  y = t.accumulate ? y + v : v;
}

// GEMV streams each weight row once. A tile's R rows are contiguous, and so is the next tile
// (the driver walks rows in order), but rows of a few KB are too short for the hardware stream
// prefetcher to ramp up on each. So while block b of this tile is computed, the matching slice of
// a later tile's bytes is prefetched: `step` bytes per At() call, at least ~12 KB ahead (two tiles
// of short rows). The distance costs a division, so it is computed once per tile. Prefetches past
// the end of the matrix are harmless (they never fault).
//
// The lines go to L2 on x86 (prefetcht1), to L1 on aarch64 (prfm pldl1keep). On a Zen 4 EPYC VM,
// prefetcht0 (into L1) left the Q4_K GEMV reading at 13-26 GB/s from memory, prefetcht1 at 27-43,
// on the same binary otherwise (GemvCold, docs/benchmarks.md); the Zen 5 VM read equally with
// either. ARM was not measured, so it keeps what it had.
#if defined(__aarch64__)
inline constexpr int kPrefetchLocality = 3;
#else
inline constexpr int kPrefetchLocality = 2;
#endif

class TilePrefetch {
 public:
  TilePrefetch(const TileArgs& t, int R, int64_t step) : step_(step) {
    const int64_t tile_bytes = R * static_cast<int64_t>(t.w_stride);
    const int64_t ahead = 1 + 12288 / tile_bytes;
    base_ = reinterpret_cast<const char*>(t.w) + ahead * tile_bytes;
  }
  void At(int64_t b) const {
    const char* p = base_ + b * step_;
    for (int64_t o = 0; o < step_; o += 64) __builtin_prefetch(p + o, 0, kPrefetchLocality);
  }

 private:
  const char* base_;
  int64_t step_;
};

}  // namespace
}  // namespace phi4mm
