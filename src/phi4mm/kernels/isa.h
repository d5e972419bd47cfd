// The one dispatch point for the kernel instruction set: every kernel family (matmul tiles,
// attention rows, vision ops, the machine-peak loops) has one table per ISA, and the process runs
// the tables of the single ISA chosen here. The choice is the best ISA that this build compiled and
// this CPU runs (x86-64: AVX-512 VNNI > AVX-VNNI > AVX2+FMA+F16C > scalar; aarch64: NEON with dot
// product > NEON > scalar), unless the environment variable PHI4MM_ISA names one (scalar, avx2,
// avxvnni, avx512, neon, neondot): then that one, or, when the CPU or the build lacks it, a refusal that the CLI and
// Model::Load report (IsaOverrideStatus) while the kernels fall back to the scalar tables.
#pragma once

#include <string_view>
#include <vector>

#include "phi4mm/base/status.h"
#include "phi4mm/kernels/cpu_features.h"

namespace phi4mm {

// Weakest to strongest within each architecture; the order is also the order of AvailableIsas.
// kAvxVnni is the AVX2 table with the integer tiles on ymm vpdpbusd: for the AVX2 CPUs that have
// AVX-VNNI but no AVX-512 (Intel client cores since Alder Lake), and runnable on every AVX-512 VNNI
// CPU too (see AvxVnniEncoding).
enum class Isa { kScalar, kAvx2, kAvxVnni, kAvx512, kNeon, kNeonDot };
inline constexpr Isa kAllIsas[] = {Isa::kScalar, Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512, Isa::kNeon, Isa::kNeonDot};

// The ISA whose float kernels `isa` runs (kScalar, kAvx2 or kNeon): avxvnni and avx512 add integer
// matmul tiles to AVX2's table, neondot to NEON's. The kernel families without integer tiles
// (attention rows, vision ops, activations) dispatch on this, so an ISA added on top of a base
// needs no entry of its own there.
Isa FloatKernelIsa(Isa isa);

// "scalar", "avx2", "avxvnni", "avx512", "neon", "neondot" (the PHI4MM_ISA spellings).
const char* IsaName(Isa isa);
// What the CPU must have for `isa`, in words ("AVX2, FMA, F16C and BMI2").
const char* IsaRequirement(Isa isa);
// Whether this build compiled the tables of `isa` (x86 tables on x86-64, NEON ones on aarch64).
bool IsaBuilt(Isa isa);
// Whether a CPU with features `f` can run `isa`.
bool IsaRuns(Isa isa, const CpuFeatures& f);
// Every ISA built and runnable here, scalar first: what tests and benchmarks loop over.
std::vector<Isa> AvailableIsas();
// The ISA a PHI4MM_ISA value selects on a CPU with features `f`: the best one when `request` is
// empty, else the one named, or an error saying why it cannot be used.
Result<Isa> ResolveIsa(std::string_view request, const CpuFeatures& f);
// The ISA of this process, resolved once from PHI4MM_ISA and the CPU (scalar when the override
// was refused).
Isa ActiveIsa();

// Within the avx512 ISA, the register width of the Q4_K tile (and of the int8 peak it is measured
// against): zmm, two blocks per register, where the CPU runs a 512-bit vpdpbusd at the 256-bit rate
// (CpuFeatures::avx512_zmm_full_rate), else ymm. PHI4MM_AVX512_TILES=ymm|zmm overrides it (both run
// on every AVX-512 VNNI CPU; benchmarks compare them); any other value is refused like a bad
// PHI4MM_ISA.
enum class Avx512Tiles { kYmm, kZmm };
Result<Avx512Tiles> ResolveAvx512Tiles(std::string_view request, const CpuFeatures& f);
Avx512Tiles ActiveAvx512Tiles();

// The avxvnni tables are one source compiled twice: with VEX encoding (AVX-VNNI, whose CPUs may
// lack AVX-512) and with EVEX encoding (AVX-512 VL/VNNI, whose CPUs may lack AVX-VNNI: Zen 4, Ice
// Lake, Cascade Lake). The instructions compute the same; the encodings differ in which CPUs decode
// them. Which copies a CPU runs, and the one the avxvnni ISA uses there (VEX where it runs):
struct AvxVnniEncodings {
  bool vex = false;
  bool evex = false;
};
AvxVnniEncodings AvxVnniRunnable(const CpuFeatures& f);
enum class VnniEncoding { kVex, kEvex };
VnniEncoding AvxVnniEncoding();

// OK, or the refusal of PHI4MM_ISA or PHI4MM_AVX512_TILES (the CLI and Model::Load return it).
Status IsaOverrideStatus();

}  // namespace phi4mm
