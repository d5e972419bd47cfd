// Helpers shared by the benchmark commands (cmd_bench.cc, cmd_bench_batch.cc): timing, resident
// memory, random prompts, and what a decode step reads and computes for a loaded decoder.
#pragma once

#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "phi4mm/base/process_memory.h"
#include "phi4mm/kernels/machine_peaks.h"
#include "phi4mm/models/decoder.h"

namespace phi4mm::cli {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t0);
// printf-formats one number (`f` takes exactly one double).
std::string Fmt(const char* f, double v);
// One line for the benchmarks' output: resident weight-file bytes and the share in 2 MiB pages.
std::string FilePagesLine(const FilePages& p);
// Ordinary (non-placeholder) token ids.
std::vector<int32_t> RandomIds(std::mt19937& rng, int64_t n, int64_t vocab);
// Bytes of the adapters of `mode` (what that mode adds to memory and to every decode step).
double AdapterBytes(const Decoder& dec, LoraMode mode);
// Bytes one decode step reads in `mode`: every linear base matrix, the adapter of `mode`, the
// lm_head and the norms (the KV cache is added by the caller).
double DecodeWeightBytes(const Decoder& dec, LoraMode mode);
// Linear multiply-adds per decoder position (base matrices only).
double LinearMacsPerToken(const Decoder& dec);
// The prefill compute ceiling in GOP/s (2 per multiply-add) for the decoder's bulk format, that of
// its MLP gate_up matrices: the int8 peak of the matching tile's instruction mix for Q4_K / Q8_0
// (q4m keeps Q4_K there), the f32 FMA peak for float weights.
double ComputeCeilingGops(const Decoder& dec, const MachinePeaks& peaks);
// The same for GEMMs on weights of `format` (the encoders' linears).
double ComputeCeilingGops(WeightFormat format, const MachinePeaks& peaks);

}  // namespace phi4mm::cli
