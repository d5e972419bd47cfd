// CPU feature detection: CPUID through <cpuid.h> (works with GCC and Clang alike) including the OS
// check (XGETBV) that the AVX / AVX-512 register state is enabled on x86; the AT_HWCAP auxiliary
// vector bits on Linux aarch64. Every field is false on other targets.
#include "phi4mm/kernels/cpu_features.h"

#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

namespace phi4mm {

namespace {

#if defined(__x86_64__) || defined(__i386__)
uint64_t Xgetbv0() {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}
#endif

CpuFeatures Detect() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return f;
  const bool amd = b == 0x68747541 && d == 0x69746e65 && c == 0x444d4163;  // "AuthenticAMD"
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const unsigned base_family = (a >> 8) & 0xF;
  const unsigned family = base_family == 0xF ? base_family + ((a >> 20) & 0xFF) : base_family;
  const bool osxsave = (c >> 27) & 1;
  const uint64_t xcr0 = osxsave ? Xgetbv0() : 0;
  const bool avx_state = (xcr0 & 0x6) == 0x6;          // XMM and YMM state
  const bool avx512_state = (xcr0 & 0xe6) == 0xe6;     // plus opmask and ZMM state
  f.fma = avx_state && ((c >> 12) & 1);
  f.f16c = avx_state && ((c >> 29) & 1);
  unsigned leaf7_subleaves = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    leaf7_subleaves = a;  // the highest subleaf of leaf 7
    f.avx2 = avx_state && ((b >> 5) & 1);
    f.bmi2 = ((b >> 3) & 1) && ((b >> 8) & 1);  // BMI1 (bit 3) and BMI2 (bit 8)
    f.avx512f = avx512_state && ((b >> 16) & 1);
    f.avx512bw = avx512_state && ((b >> 30) & 1);
    f.avx512vl = avx512_state && ((b >> 31) & 1);
    f.avx512vnni = avx512_state && ((c >> 11) & 1);
    f.avx512_zmm_full_rate = f.avx512vnni && amd && family >= 0x1A;
  }
  if (leaf7_subleaves >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d)) f.avx_vnni = avx_state && ((a >> 4) & 1);
#elif defined(__aarch64__) && defined(__linux__)
  // The bit numbers of the Linux arm64 ABI (arch/arm64/include/uapi/asm/hwcap.h): HWCAP_ASIMD is
  // bit 1, HWCAP_ASIMDDP bit 20.
  const unsigned long hwcap = getauxval(AT_HWCAP);
  f.neon = (hwcap >> 1) & 1;
  f.neon_dot = f.neon && ((hwcap >> 20) & 1);
#elif defined(__aarch64__)
  f.neon = true;  // Advanced SIMD is part of the aarch64 baseline; without hwcaps, assume no dot product
#endif
  return f;
}

}  // namespace

const CpuFeatures& GetCpuFeatures() {
  static const CpuFeatures features = Detect();
  return features;
}

}  // namespace phi4mm
