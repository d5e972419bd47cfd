// Measured ceilings of the machine we run on, for benchmarks that report a figure next to what the
// hardware allows: streaming read bandwidth over a buffer much larger than the caches, read by the
// pool's threads together, the f32 FMA peak, and the int8 multiply-add peak measured with the
// instruction the Q4_K GEMM tile of the process's ISA uses (vpdpbusd on AVX-512, vpmaddubsw ->
// int16 add chains on AVX2, sdot on NEON with dot product, smull + sadalp on plain NEON), counted
// as 8-bit multiply-adds either way, and on AVX2 also that of the Q8_0 tile's instruction
// sequence (vpsignb, vpmaddubsw, vpmaddwd per 32 MACs, then the fold and float scaling). Each figure
// is the best of several short trials after a warm-up, so it is a ceiling, not an average. Takes a
// fraction of a second to a few seconds.
#pragma once

#include <cstddef>
#include <cstdint>

#include "phi4mm/base/thread_pool.h"

namespace phi4mm {

struct MachinePeaks {
  int threads = 1;
  double read_gb_per_s = 0;    // 1e9 bytes per second, all threads together
  double f32_gflop_per_s = 0;  // FMA counted as 2 FLOP
  double int8_gmac_per_s = 0;  // u8 x s8 multiply-adds
  // The same for the Q8_0 tile's instruction mix where it differs: on AVX2 (no VNNI) every 32
  // MACs of a Q8_0 x A8 pair also pay a vpmaddwd widening (the per-32 scales leave no room for
  // int16 accumulation) and a vpsignb (the sign trick), and every 128 the fold, a convert and the
  // float scaling; measured on that whole sequence. Equal to int8_gmac_per_s on the other tables,
  // whose Q8_0 and Q4_K tiles use the same instruction.
  double int8_q8_gmac_per_s = 0;
  const char* isa = "";        // the process's kernel ISA (IsaName(ActiveIsa()))
};

struct PeakOptions {
  size_t read_bytes = size_t{256} << 20;
  int trials = 5;
  int64_t compute_iterations = 2'000'000;  // per thread and trial
};

// Runs on every thread of `pool` (or the calling thread when null).
MachinePeaks MeasureMachinePeaks(ThreadPool* pool, const PeakOptions& opts = {});
// Only the read bandwidth of MeasureMachinePeaks (opts.read_bytes, opts.trials), in 1e9 B/s: for
// re-measuring it during a long benchmark, as this VM's bandwidth drifts.
double MeasureReadBandwidth(ThreadPool* pool, const PeakOptions& opts = {});

namespace peaks_internal {

// Kernels behind MeasureMachinePeaks; each returns a value that depends on all its work.
// Sums `n` bytes (n a multiple of 128) as 64-bit words.
uint64_t ReadSumScalar(const uint8_t* p, size_t n);
uint64_t ReadSumAvx2(const uint8_t* p, size_t n);
// `iters` iterations of 12 independent 8-wide FMA chains (192 FLOP each).
float FmaLoopScalar(int64_t iters, float seed);
float FmaLoopAvx2(int64_t iters, float seed);
// `iters` iterations of 8 independent chains of 32 MACs (256 MAC each): vpmaddubsw into an int16
// vpaddw accumulator on AVX2, the instruction mix of the AVX2 Q4_K tile.
int32_t Int8LoopScalar(int64_t iters, int32_t seed);
int32_t Int8LoopAvx2(int64_t iters, int32_t seed);
// The AVX2 Q8_0 tile's work for two (weight row, activation row) pairs over four blocks per
// iteration (256 MAC): per 32 MACs vpsignb, vpmaddubsw and a vpmaddwd widening, per 128 the fold
// (two vpaddd, one vphaddd), a convert, the scales' product and an FMA; measured by
// MeasureMachinePeaks as int8_q8_gmac_per_s, the ceiling of that tile on this core.
int32_t Int8PairLoopAvx2(int64_t iters, int32_t seed);
// `iters` iterations of 12 independent ymm vpdpbusd chains (384 MAC each), the AVX-512 Q4_K tile's
// instruction (12 chains cover its latency at two per cycle).
inline constexpr int kInt8LoopVnniMacs = 384;
int32_t Int8LoopVnni(int64_t iters, int32_t seed);
// The same 12 ymm chains in VEX encoding (machine_peaks_avxvnni.cc), for the avxvnni table on a CPU
// with AVX-VNNI; on AVX-512 CPUs without it that table is measured with Int8LoopVnni.
int32_t Int8LoopAvxVnni(int64_t iters, int32_t seed);
// The same 12 chains on zmm (the avx512zmm table's Q4_K tile).
inline constexpr int kInt8LoopVnniZmmMacs = 768;
int32_t Int8LoopVnniZmm(int64_t iters, int32_t seed);
// NEON (machine_peaks_neon*.cc, aarch64 builds): a 128-byte-per-step streaming read, 24
// independent 4-wide fmla chains (192 FLOP per iteration, as the AVX2 loop), and 8 independent
// int8 chains: sdot (kInt8LoopNeonDotMacs per iteration) or smlal / smlal2 into int16
// (kInt8LoopNeonMacs), the instructions of the NEON Q4_K tiles.
uint64_t ReadSumNeon(const uint8_t* p, size_t n);
float FmaLoopNeon(int64_t iters, float seed);
inline constexpr int kInt8LoopNeonMacs = 128;
int32_t Int8LoopNeon(int64_t iters, int32_t seed);
inline constexpr int kInt8LoopNeonDotMacs = 128;
int32_t Int8LoopNeonDot(int64_t iters, int32_t seed);

}  // namespace peaks_internal

}  // namespace phi4mm
