// The ISA dispatch point: which ISAs the build compiled (CMake defines PHI4MM_BUILD_X86_KERNELS or
// PHI4MM_BUILD_ARM_KERNELS for the target architecture), which ones the CPU runs, and the
// process-wide choice with its PHI4MM_ISA override.
#include "phi4mm/kernels/isa.h"

#include <cstdlib>
#include <string>

namespace phi4mm {

namespace {

struct Choice {
  Isa isa = Isa::kScalar;
  Avx512Tiles tiles = Avx512Tiles::kYmm;
  Status status;
};

const Choice& GetChoice() {
  static const Choice choice = [] {
    const char* env = std::getenv("PHI4MM_ISA");
    Result<Isa> r = ResolveIsa(env ? env : "", GetCpuFeatures());
    Choice c;
    if (r.ok()) c.isa = *r;
    else c.status = r.status();
    const char* tiles_env = std::getenv("PHI4MM_AVX512_TILES");
    Result<Avx512Tiles> t = ResolveAvx512Tiles(tiles_env ? tiles_env : "", GetCpuFeatures());
    if (t.ok()) c.tiles = *t;
    else if (c.status.ok()) c.status = t.status();
    return c;
  }();
  return choice;
}

std::string AllNames() {
  std::string s;
  for (Isa i : kAllIsas) s += (s.empty() ? "" : ", ") + std::string(IsaName(i));
  return s;
}

}  // namespace

Isa FloatKernelIsa(Isa isa) {
  switch (isa) {
    case Isa::kAvx2:
    case Isa::kAvxVnni:
    case Isa::kAvx512: return Isa::kAvx2;
    case Isa::kNeon:
    case Isa::kNeonDot: return Isa::kNeon;
    case Isa::kScalar: return Isa::kScalar;
  }
  return Isa::kScalar;
}

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvxVnni: return "avxvnni";
    case Isa::kAvx512: return "avx512";
    case Isa::kNeon: return "neon";
    case Isa::kNeonDot: return "neondot";
  }
  return "?";
}

const char* IsaRequirement(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "nothing";
    case Isa::kAvx2: return "AVX2, FMA, F16C and BMI2";
    case Isa::kAvxVnni: return "AVX2, FMA, F16C, BMI2 and AVX-VNNI (or AVX-512 F/BW/VL/VNNI)";
    case Isa::kAvx512: return "AVX2, FMA, F16C, BMI2 and AVX-512 F/BW/VL/VNNI";
    case Isa::kNeon: return "Advanced SIMD (NEON)";
    case Isa::kNeonDot: return "Advanced SIMD with the dot-product instructions (asimddp)";
  }
  return "?";
}

bool IsaBuilt(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return true;
    case Isa::kAvx2:
    case Isa::kAvxVnni:
    case Isa::kAvx512:
#if defined(PHI4MM_BUILD_X86_KERNELS)
      return true;
#else
      return false;
#endif
    case Isa::kNeon:
    case Isa::kNeonDot:
#if defined(PHI4MM_BUILD_ARM_KERNELS)
      return true;
#else
      return false;
#endif
  }
  return false;
}

AvxVnniEncodings AvxVnniRunnable(const CpuFeatures& f) {
  const bool avx2 = f.avx2 && f.fma && f.f16c && f.bmi2;
  AvxVnniEncodings e;
  e.vex = avx2 && f.avx_vnni;
  e.evex = avx2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512vnni;
  return e;
}

VnniEncoding AvxVnniEncoding() {
  return AvxVnniRunnable(GetCpuFeatures()).vex ? VnniEncoding::kVex : VnniEncoding::kEvex;
}

bool IsaRuns(Isa isa, const CpuFeatures& f) {
  const bool avx2 = f.avx2 && f.fma && f.f16c && f.bmi2;
  const AvxVnniEncodings vnni = AvxVnniRunnable(f);
  switch (isa) {
    case Isa::kScalar: return true;
    case Isa::kAvx2: return avx2;
    case Isa::kAvxVnni: return vnni.vex || vnni.evex;
    case Isa::kAvx512: return vnni.evex;
    case Isa::kNeon: return f.neon;
    case Isa::kNeonDot: return f.neon && f.neon_dot;
  }
  return false;
}

std::vector<Isa> AvailableIsas() {
  std::vector<Isa> v;
  for (Isa i : kAllIsas)
    if (IsaBuilt(i) && IsaRuns(i, GetCpuFeatures())) v.push_back(i);
  return v;
}

Result<Isa> ResolveIsa(std::string_view request, const CpuFeatures& f) {
  if (request.empty()) {
    Isa best = Isa::kScalar;
    for (Isa i : kAllIsas)
      if (IsaBuilt(i) && IsaRuns(i, f)) best = i;
    return best;
  }
  for (Isa i : kAllIsas) {
    if (request != IsaName(i)) continue;
    if (!IsaBuilt(i))
      return Unsupported("PHI4MM_ISA=" + std::string(request) + ": this build of phi4mm has no " + IsaName(i) +
                         " kernels (they are compiled only for their architecture); unset PHI4MM_ISA or pick "
                         "one this build has");
    if (!IsaRuns(i, f))
      return Unsupported("PHI4MM_ISA=" + std::string(request) + ": this CPU lacks " + IsaRequirement(i) +
                         "; unset PHI4MM_ISA to use the best table it runs, or set PHI4MM_ISA=scalar");
    return i;
  }
  return InvalidArgument("PHI4MM_ISA=" + std::string(request) + " is not a kernel table (expected one of " +
                         AllNames() + ", or unset for the best this CPU runs)");
}

Isa ActiveIsa() { return GetChoice().isa; }

Result<Avx512Tiles> ResolveAvx512Tiles(std::string_view request, const CpuFeatures& f) {
  if (request.empty()) return f.avx512_zmm_full_rate ? Avx512Tiles::kZmm : Avx512Tiles::kYmm;
  if (request == "ymm") return Avx512Tiles::kYmm;
  if (request == "zmm") return Avx512Tiles::kZmm;
  return InvalidArgument("PHI4MM_AVX512_TILES=" + std::string(request) +
                         " is not a tile width (expected ymm or zmm, or unset for the one this CPU runs faster)");
}

Avx512Tiles ActiveAvx512Tiles() { return GetChoice().tiles; }

Status IsaOverrideStatus() { return GetChoice().status; }

}  // namespace phi4mm
