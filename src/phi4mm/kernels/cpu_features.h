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
  // BMI1 and BMI2 (every AVX2 CPU of Intel and AMD has both): Highway's AVX2 target, which the
  // float kernels compile for (kernels/*_hwy-inl.h), may use them.
  bool bmi2 = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512vnni = false;
  // AVX-VNNI: the VEX-encoded ymm vpdpbusd of Intel's client cores since Alder Lake (which have no
  // AVX-512) and of AMD Zen 5; CPUID leaf 7 subleaf 1, EAX bit 4.
  bool avx_vnni = false;
  // A 512-bit vpdpbusd runs at the rate of a 256-bit one, i.e. twice the multiply-adds per cycle
  // (AMD family 1Ah, Zen 5, and later). No CPUID bit says so: it is read from the vendor and family.
  // Intel's cores split a zmm vpdpbusd over the two ports that run two ymm ones; Zen 4 (family 19h)
  // runs it in two halves.
  bool avx512_zmm_full_rate = false;
  // aarch64: Advanced SIMD (baseline on every aarch64 CPU) and the SDOT/UDOT dot-product
  // instructions (ARMv8.2 FEAT_DotProd, "asimddp" in /proc/cpuinfo).
  bool neon = false;
  bool neon_dot = false;
};

// Detected on first use; thread-safe.
const CpuFeatures& GetCpuFeatures();

}  // namespace phi4mm
