// What the CPU we run on supports, read once: on x86 through CPUID (with the XGETBV check that the
// OS saves the wider register state), on Linux aarch64 through the kernel's hardware capability
// bits (getauxval(AT_HWCAP)). The one dispatch point (kernels/isa.h) picks the kernel tables from
// these; nothing else should read them to choose code.
#pragma once

namespace phi4mm {

struct CpuFeatures {
  // x86-64
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512vnni = false;
  // aarch64: Advanced SIMD (baseline on every aarch64 CPU) and the SDOT/UDOT dot-product
  // instructions (ARMv8.2 FEAT_DotProd, "asimddp" in /proc/cpuinfo).
  bool neon = false;
  bool neon_dot = false;
};

// Detected on first use; thread-safe.
const CpuFeatures& GetCpuFeatures();

}  // namespace phi4mm
