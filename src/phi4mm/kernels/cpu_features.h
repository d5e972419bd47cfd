// What the CPU we run on supports, read once through CPUID (__builtin_cpu_supports). Kernel
// families pick their implementation from this at their single dispatch point.
#pragma once

namespace phi4mm {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512vnni = false;
};

// Detected on first use; thread-safe.
const CpuFeatures& GetCpuFeatures();

}  // namespace phi4mm
